/*
 * Field checks of what a frontend sent, done before anything touches the
 * registry: NULL pointers, names, job ids, verifiers, ranks, ports, addresses,
 * kinds.  Each returns 0, or -1 with a sentence in `why` naming the field.
 */
#ifndef BROKER_VALIDATE_H
#define BROKER_VALIDATE_H

#include <stdbool.h>
#include <stddef.h>
#include "address.h"
#include "registry.h"

struct qcg__cluster;
struct qcg__node;
struct qcg__contact;
struct qcg__observation;

int validate_cluster(const struct qcg__cluster *in, struct reg_cluster *out, char *why,
                     size_t whylen);
int validate_node(const struct qcg__node *in, struct reg_node *out, char *why, size_t whylen);
/* in->cluster may be NULL or empty (the caller fills it); in->node must be set. */
int validate_contact(const struct qcg__contact *in, struct reg_contact *out, char *why,
                     size_t whylen);
int validate_job(const char *job, const char *verifier, char *why, size_t whylen);
int validate_rank(int rank, const char *field, char *why, size_t whylen);
/* A probe's observation (qcg_service.h): names, the kind, mapping and
   inbound words, portPreserving -1..1, publicAddress empty or an address.
   out->when is left 0. */
int validate_observation(const struct qcg__observation *in, struct reg_observation *out, char *why,
                         size_t whylen);

#endif
