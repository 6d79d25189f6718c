/* What leaves the node in place of a job's secret, and how strong a secret
   must be.  The helper derives the verifier; the frontend and the broker
   store and compare only verifiers, so nothing they hold is the secret that
   ranks authenticate each other with (libqcgconn derives that key from the
   secret under a label of its own). */
#ifndef QCG_VERIFIER_H
#define QCG_VERIFIER_H

#include <stdbool.h>

/* The least estimated entropy of a job secret, and how to get one. */
#define QCG_SECRET_MIN_BITS 128
#define QCG_SECRET_ADVICE "make one with: openssl rand -hex 32"

/* Hex of HMAC-SHA256: 64 characters. */
#define QCG_VERIFIER_LEN 64

/* An upper estimate of the secret's entropy in bits: its length times the
   bits per character of the smallest class covering all its characters
   (digits 3.32, hex 4, letters, digits and base64's +/=_- 5.95, other
   printable 6.5).  0 for NULL. */
int secret_entropy_bits(const char *secret);
/* secret_valid and at least QCG_SECRET_MIN_BITS by that estimate. */
bool secret_strong(const char *secret);

/* HMAC-SHA256(key = secret, "qcg-connect job verifier v1" NUL job) as
   lowercase hex into out; -1 if the MAC failed. */
int job_verifier(const char *job, const char *secret, char out[QCG_VERIFIER_LEN + 1]);
/* Exactly QCG_VERIFIER_LEN lowercase hex characters. */
bool verifier_valid(const char *verifier);

#endif
