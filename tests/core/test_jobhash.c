/* core/jobhash.c: SHA-256 of "job:secret", as sha256sum gives it. */
#include "check.h"
#include "hex.h"
#include "jobhash.h"

int main(void)
{
    unsigned char a[JOB_HASH_LEN], b[JOB_HASH_LEN], c[JOB_HASH_LEN];
    char text[2 * JOB_HASH_LEN + 1];

    CHECK(job_secret_hash("job1", "s3cret", a) == 0);
    CHECK(job_secret_hash("job1", "s3cret", b) == 0);
    CHECK(job_secret_hash("job1", "other", c) == 0);
    CHECK(memcmp(a, b, JOB_HASH_LEN) == 0);
    CHECK(memcmp(a, c, JOB_HASH_LEN) != 0);
    /* printf 'job1:s3cret' | sha256sum */
    hex_encode(a, JOB_HASH_LEN, text);
    CHECK_STR(text, "c68c1b1a0f00bb47f61dc4290f853b5da063dc2f1aa7fa610bda8b7110f0a414");
    /* The separator is part of what is hashed: "job-4" + "2:..." differs. */
    CHECK(job_secret_hash("job-42", "a secret with spaces", a) == 0);
    hex_encode(a, JOB_HASH_LEN, text);
    CHECK_STR(text, "9206ebb9facb27980fb49baeb218714e4b6ac1cdd3bdd448cbdabdfe32caf185");
    CHECK(job_secret_hash("job-4", "2:a secret with spaces", b) == 0);
    CHECK(memcmp(a, b, JOB_HASH_LEN) != 0);
    return check_result("test_jobhash");
}
