/*
 * What the broker learned, kept across restarts: the outcome memory (which
 * technique worked or failed between two clusters, and the witnesses of each
 * failure), the last probe's observation of each cluster (what
 * `qcg-broker --grid` shows as observed) and the addresses each cluster's
 * frontend connects from (known to the SOAP server from the start, before
 * it logs in again: soap_server_know) in a small text file that is rewritten atomically (a
 * temporary file in the same directory, fsync, rename) so that a crash at any moment leaves the old
 * file or the new one, never half of one.  Read once at start; a damaged line is skipped and
 * counted, never fatal: the state is advice, and the broker learns it again from reports.
 *
 *   qcg-broker-state 1
 *   pair FROM TO TECHNIQUE OK FAILED LAST_OK LAST LAST_SETUP_MS
 *   witness FROM TO TECHNIQUE JOB NODE AT
 *   observed CLUSTER WHEN NODE KIND PUBLIC|- PORT_PRESERVING MAPPING INBOUND
 *   frontend CLUSTER ADDRESS...
 */
#ifndef BROKER_STATE_FILE_H
#define BROKER_STATE_FILE_H

#include <stddef.h>
#include <stdint.h>

struct outcomes;
struct registry;

#define STATE_FILE_MAX (16 * 1024 * 1024)
/* How often a changed state is written while the broker runs. */
#define STATE_SAVE_INTERVAL_S 30

/* Makes path's directory (one level, mode 0700) when it does not exist:
   without systemd's StateDirectory nobody else does.  0, or -1 with err
   saying what to do. */
int state_dir_ready(const char *path, char *err, size_t errlen);
/* Writes o, and reg's observations (reg may be NULL), to path atomically
   (mode 0600).  0, or -1 with err. */
int state_save(struct outcomes *o, struct registry *reg, const char *path, char *err,
               size_t errlen);

struct state_loaded {
    size_t pairs;        /* restored */
    size_t observations; /* clusters' observations restored */
    size_t frontends;    /* clusters' frontend addresses restored */
    size_t skipped;      /* lines not understood or not valid */
    int first_bad;       /* the first skipped line's number, 0 when none */
    int missing;         /* 1: no file yet (a first start) */
};
/* Reads path into o and reg (registry_observation_restore; reg may be NULL).
   0 (also when the file does not exist: *out says so), or -1 with err when
   the file cannot be read or is not a state file. */
int state_load(struct outcomes *o, struct registry *reg, const char *path, struct state_loaded *out,
               char *err, size_t errlen);

/* A thread that writes the state every STATE_SAVE_INTERVAL_S when it
   changed, and once more when stopped.  NULL with err. */
struct state_saver;
struct state_saver *state_saver_start(struct outcomes *o, struct registry *reg, const char *path,
                                      char *err, size_t errlen);
void state_saver_stop(struct state_saver *s);

#endif
