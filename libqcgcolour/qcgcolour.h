/* qcgcolour.h: where a rank of a qcg-connect job runs, as names ("colours")
   per level of the grid, and as integers consistent across every rank of the
   job, e.g. for MPI_Comm_split (QCG-OMPI's QCG_ColorToInt).

   The colours come from the environment the job's launch gives each rank
   (docs/user.md, "Where a rank runs: colours"):
     QCG_COLOUR_SITE, QCG_COLOUR_NODE     this rank's site (its cluster, as the
                                          grid declares it) and node name
     QCG_COLOURS_SITE, QCG_COLOURS_NODE   every site and node of the job,
                                          comma-separated, sorted (strcmp),
                                          each once
   so every call works before MPI_Init, after it, and without MPI at all.
   Nothing is cached: each call reads the environment.  Calls are
   thread-safe as long as nobody changes these variables meanwhile.  The
   library never prints; errors are negative QCG_COLOUR_E* codes. */
#ifndef QCGCOLOUR_H
#define QCGCOLOUR_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Levels, from the widest: a site holds nodes. */
#define QCG_COLOUR_SITE 0
#define QCG_COLOUR_NODE 1

#define QCG_COLOUR_ELEVEL (-1)    /* no such level (see qcg_colour_depth) */
#define QCG_COLOUR_EUNSET (-2)    /* the variable is not set: not started by qcg-mpirun */
#define QCG_COLOUR_EINVAL (-3)    /* the variable is malformed */
#define QCG_COLOUR_ENOTFOUND (-4) /* the colour is not among the job's colours */
#define QCG_COLOUR_ERANGE (-5)    /* the caller's buffer is too short */

/* The number of levels (2: site, node). */
int qcg_colour_depth(void);

/* "site" or "node"; NULL for another level. */
const char *qcg_colour_level_name(int level);

/* This rank's colour at level, copied into buf (len bytes, NUL included; 64
   always suffice).  0, or QCG_COLOUR_ELEVEL, _EUNSET, _EINVAL, _ERANGE. */
int qcg_colour_string(int level, char *buf, size_t len);

/* The number of distinct colours of the job at level (N >= 1), or a negative
   QCG_COLOUR_E* code. */
int qcg_colour_count(int level);

/* colour's integer at level: its place (0..N-1) in the job's sorted list, the
   same on every rank.  QCG_COLOUR_ENOTFOUND when the job has no such colour. */
int qcg_colour_to_int(int level, const char *colour);

/* This rank's integer at level: qcg_colour_to_int of qcg_colour_string. */
int qcg_colour_int(int level);

/* A sentence for a QCG_COLOUR_E* code (naming the variable to set). */
const char *qcg_colour_strerror(int err);

#ifdef __cplusplus
}
#endif

#endif
