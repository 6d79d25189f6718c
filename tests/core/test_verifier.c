/* core/verifier.c: the job verifier as openssl computes it, and which
   secrets are strong enough. */
#include "check.h"
#include "fixtures.h"
#include "verifier.h"

int main(void)
{
    char v[QCG_VERIFIER_LEN + 1], w[QCG_VERIFIER_LEN + 1];

    /* printf 'qcg-connect job verifier v1\0job1' | openssl dgst -sha256 -hmac SECRET */
    CHECK(job_verifier("job1", TEST_SECRET, v) == 0);
    CHECK_STR(v, "8f21b28b725d258a7ef281657eb365e35294dd84624d0c2fa47d7c9943c0fe4b");
    CHECK(verifier_valid(v));
    /* Another job or another secret: another verifier; the secret is not in it. */
    CHECK(job_verifier("job2", TEST_SECRET, w) == 0 && strcmp(v, w) != 0);
    CHECK(job_verifier("job1", TEST_SECRET_2, w) == 0 && strcmp(v, w) != 0);
    CHECK(strstr(TEST_SECRET, v) == NULL && strstr(v, "5ec2e7") == NULL);

    CHECK(!verifier_valid(NULL) && !verifier_valid("") && !verifier_valid("s3cret"));
    CHECK(!verifier_valid(TEST_SECRET "0")); /* 65 characters */
    v[0] = 'A';
    CHECK(!verifier_valid(v)); /* uppercase */

    /* The estimate: length times the bits of the smallest class. */
    CHECK_EQ(secret_entropy_bits(NULL), 0);
    CHECK_EQ(secret_entropy_bits("0123456789"), 33); /* digits: 3.32 */
    CHECK_EQ(secret_entropy_bits(TEST_SECRET), 256); /* hex: 4 */
    CHECK_EQ(secret_entropy_bits("ABCDEF0123456789"), 64);
    CHECK_EQ(secret_entropy_bits("Zm9vYmFy+/=_-"), 77); /* base64: 5.95 */
    CHECK_EQ(secret_entropy_bits("a b!"), 26);          /* printable: 6.5 */

    /* 32 hex characters (openssl rand -hex 16) are just enough; 31 not. */
    CHECK(secret_strong("0123456789abcdef0123456789abcdef"));
    CHECK(!secret_strong("0123456789abcdef0123456789abcde"));
    CHECK(secret_strong(TEST_SECRET));
    CHECK(!secret_strong("s3cret") && !secret_strong("the job secret"));
    /* openssl rand -base64 16: 24 characters, 142 bits. */
    CHECK(secret_strong("q83vEjRWeJCrze8SNFZ4kA=="));
    /* 39 digits: 129 bits. */
    CHECK(secret_strong("123456789012345678901234567890123456789"));
    CHECK(!secret_strong("tab\tand then enough characters to pass"));
    return check_result("test_verifier");
}
