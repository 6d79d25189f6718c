/* helper-tls-garbage SOCKET JOB SECRET RANK PEER: connects to rank PEER of
   JOB as RANK through the helper at SOCKET, encrypted (policy always), then
   writes a TLS application-data record that does not authenticate straight
   onto the socket, past the session, as a broken or hostile peer would (its
   first 13 bytes half a second before the rest).
   Exit 0 once the peer has closed the connection (within 10 s), 1 if it has
   not, 2 on a setup failure.  For helper-test.sh probe: the probe endpoint
   must drop such a connection, and no other. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "qcgconn.h"

#define CLOSE_WAIT_MS 10000

int main(int argc, char **argv)
{
    /* application_data, TLS 1.2 on the wire (as every TLS 1.3 record), 32 bytes. */
    static const unsigned char record[5 + 32] = {0x17, 0x03, 0x03, 0x00, 0x20, 0x5a, 0x5a};
    struct qcg_options o = {.encrypt = QCG_ENCRYPT_ALWAYS};
    struct qcg_conn_info info = {0};
    qcg_ctx *ctx = NULL;
    char buf[256];
    int fd, rc;

    if (argc != 6) {
        fprintf(stderr, "usage: helper-tls-garbage SOCKET JOB SECRET RANK PEER\n");
        return 2;
    }
    o.helper_socket = argv[1];
    o.job = argv[2];
    o.secret = argv[3];
    o.rank = atoi(argv[4]);
    if ((rc = qcg_open(&ctx, &o)) < 0) {
        fprintf(stderr, "open: %s: %s\n", qcg_strerror(rc), qcg_last_error(NULL));
        return 2;
    }
    fd = qcg_connect(ctx, atoi(argv[5]), 10000, &info);
    if (fd < 0 || info.tls == NULL) {
        fprintf(stderr, "connect: %s: %s\n", fd < 0 ? qcg_strerror(fd) : "not encrypted",
                qcg_last_error(ctx));
        qcg_close(ctx);
        return 2;
    }
    /* In two parts: the peer first holds part of a record, and must wait
       for the rest without spinning, then finds it does not authenticate. */
    if (write(fd, record, 13) != 13 || usleep(500 * 1000) != 0 ||
        write(fd, record + 13, sizeof(record) - 13) != (ssize_t)(sizeof(record) - 13)) {
        fprintf(stderr, "write: %s\n", strerror(errno));
        return 2;
    }
    /* Whatever the peer sends back (an alert) until it closes. */
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        ssize_t n;

        if (poll(&p, 1, CLOSE_WAIT_MS) <= 0) {
            fprintf(stderr, "the peer kept the connection open for %d ms\n", CLOSE_WAIT_MS);
            rc = 1;
            break;
        }
        n = read(fd, buf, sizeof(buf));
        if (n <= 0) {
            printf("closed by the peer%s\n", n < 0 ? " (reset)" : "");
            rc = 0;
            break;
        }
    }
    qcg_tls_free(info.tls);
    close(fd);
    qcg_close(ctx);
    return rc;
}
