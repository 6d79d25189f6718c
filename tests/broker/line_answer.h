/* The reflector's tests: reading its one answer line. */
#ifndef TESTS_BROKER_LINE_ANSWER_H
#define TESTS_BROKER_LINE_ANSWER_H

#include <stddef.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>

/* Reads to EOF (or the socket's receive timeout) into out, without the '\n'. */
static inline void line_answer(int fd, char *out, size_t outlen)
{
    size_t got = 0;
    for (int i = 0; i < 64 && got + 1 < outlen; i++) {
        ssize_t n = recv(fd, out + got, outlen - 1 - got, 0);
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    out[got] = '\0';
    char *nl = strchr(out, '\n');
    if (nl)
        *nl = '\0';
}

#endif
