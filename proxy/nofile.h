/* RLIMIT_NOFILE for the relay: as many descriptors as max-pairs needs, or as
   the system allows. */
#ifndef PROXY_NOFILE_H
#define PROXY_NOFILE_H

/* Raises the limit towards what max_pairs needs (above the hard limit when
   privileged, up to fs.nr_open), logs what it got; returns how many pairs the
   limit leaves room for (max_pairs when enough). */
int nofile_raise(int max_pairs);

#endif
