/* help.c: btl_qcg's user-facing messages through Open MPI's show_help
   (help-mpi-btl-qcg.txt), which mpirun aggregates across ranks. */
#ifndef BTL_QCG_HELP_H
#define BTL_QCG_HELP_H

#include <stdbool.h>

#define BTL_QCG_HELP_FILE "help-mpi-btl-qcg.txt"

/* Lets show_help find our help file next to this module. */
void btl_qcg_help_init(void);

/* The component steps aside: TOPIC's message when LOUD or when the user
   named qcg in the btl list, otherwise a btl_qcg_verbose 1 line
   "not used: DETAIL". */
void btl_qcg_opt_out(const char *topic, bool loud, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
