/* What stands for a job verifier (verifier.h) where it is not kept: the
   broker's registry (checked on every publish and lookup) and the frontend's
   plan cache (part of the key). */
#ifndef QCG_JOBHASH_H
#define QCG_JOBHASH_H

#define JOB_HASH_LEN 32

/* SHA-256(job ":" secret) into out; -1 if the digest failed. */
int job_secret_hash(const char *job, const char *secret, unsigned char out[JOB_HASH_LEN]);

#endif
