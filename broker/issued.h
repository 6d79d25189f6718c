/*
 * The plans the broker issued, so that a report can be checked against one
 * (docs/architecture.md, "What the broker learns from reports"): a REPORT
 * says how a technique worked for a connection from cluster C to rank R of
 * job J, and counts only if the broker gave C a plan with that technique
 * towards J's rank R within the report window.  Without it any process could
 * report failures of techniques nobody planned.
 *
 * Keyed by (initiating cluster, job), not by initiating rank: a frontend
 * answers later lookups for a direct plan from its cache, for any rank of
 * its cluster.  Bounded: ISSUED_PER_JOB_MAX plans per (cluster, job), the
 * oldest forgotten first (one job only ever pushes out its own plans), and
 * ISSUED_BUCKETS_MAX (cluster, job) pairs.  Those are charged to their
 * cluster (the owner the broker knows: a uid is its helper's business), and
 * a full table forgets the least recently used pair of the cluster holding
 * the most, the newcomer's own when its cluster holds at least as many as
 * any other: a cluster that starts jobs without end pushes out only its own
 * plans (issue 32).  Thread-safe.
 */
#ifndef BROKER_ISSUED_H
#define BROKER_ISSUED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto.h"

/* How long a plan can be answered by a report: longer than any connect's
   timeout.  A cacheable (direct) plan is served by the frontend until the
   target withdraws, so it stays reportable for a day. */
#define ISSUED_WINDOW_S 600
#define ISSUED_CACHEABLE_WINDOW_S 86400
/* A cluster's ranks of one job plan towards every other rank: 4096 covers
   a job of 4096 ranks over two or more sites (about 60 bytes each). */
#define ISSUED_PER_JOB_MAX 4096
#define ISSUED_BUCKETS_MAX 65536

struct issued;

/* NULL on ENOMEM. */
struct issued *issued_new(size_t buckets_max);
void issued_free(struct issued *s);

/* The broker gave `cluster` a plan with technique t towards `rank` of `job`,
   reportable until `until` (unix seconds); a plan issued again is renewed. */
void issued_record(struct issued *s, const char *cluster, const char *job, int rank,
                   enum technique t, uint64_t until, uint64_t now);
/* Whether such a plan was issued and is still reportable at `now`. */
bool issued_check(struct issued *s, const char *cluster, const char *job, int rank,
                  enum technique t, uint64_t now);
/* Plans held (for --stats and tests). */
size_t issued_count(struct issued *s);

#endif
