/*
 * The client of a long-poll (cmdqueue.h is the server's side): a thread that
 * registers with an upstream service, keeps one poll for commands pending
 * there and hands each command on once.  A lost connection makes it back off
 * and register again; so does a restarted service (a new epoch), at once.
 * The frontend polls the broker with it, the helper its frontend.
 *
 * A service numbers the commands of each downstream in one queue that lives
 * as long as the service (its epoch) and takes acknowledgements cumulatively.
 * The acknowledgement is kept across registrations with the same epoch and
 * starts from 0 with a new one: a command at or below it is never handed on,
 * whatever a poll repeats (a poll whose answer was lost, a server that did
 * not hear the acknowledgement).
 */
#ifndef QCG_LONGPOLL_H
#define QCG_LONGPOLL_H

#include <stddef.h>
#include <stdint.h>

struct command;
struct longpoll;
struct soap;
struct soap_client_config;

/* Called on the poll thread with its context (reset after each call). */
struct longpoll_ops {
    /* Registers with the service and sends again what it must know.  *epoch
       holds the service's epoch seen last (0: none); 0 with the new one in
       it, or -1 with a one-line reason. */
    int (*registered)(void *arg, struct soap *soap, uint64_t *epoch, char *why, size_t whylen);
    /* Each new command, in sequence order, once; must not block for long. */
    void (*command)(void *arg, const struct command *cmd);
    /* Optional: before each poll while registered. */
    void (*before_poll)(void *arg, struct soap *soap);
    /* Optional: the link is down (why: one line), until the next
       registration succeeds. */
    void (*down)(void *arg, const char *why);
};

struct longpoll_config {
    const struct soap_client_config *client; /* how to reach the service */
    const char *service;                     /* what the log calls it: "broker", "frontend" */
    int wait;                                /* seconds a poll waits at the service */
    const struct longpoll_ops *ops;
    void *arg;
};

/* The client and its context, not yet polling; NULL with a reason in err.
   cfg->client's strings and cfg->service must outlive it. */
struct longpoll *longpoll_new(const struct longpoll_config *cfg, char *err, size_t errlen);
/* The poll thread's context: hooks of the caller's own go on it before
   longpoll_start (its open and close hooks are taken: chain them). */
struct soap *longpoll_soap(struct longpoll *lp);
int longpoll_start(struct longpoll *lp, char *err, size_t errlen);
/* Asks the thread to stop and interrupts a pending call; does not block. */
void longpoll_stop(struct longpoll *lp);
/* 1 once a stop was asked: loops in the callbacks end early. */
int longpoll_stopping(const struct longpoll *lp);
/* Registers again once the pending poll (if any) has ended, within the
   poll's wait: for what the registration declares and has changed.  Any
   thread; does not block. */
void longpoll_register_again(struct longpoll *lp);
/* Whether it is registered now, and the service's epoch then (else 0). */
void longpoll_state(struct longpoll *lp, int *connected, uint64_t *epoch);
/* Stops, waits for the thread and frees everything. */
void longpoll_free(struct longpoll *lp);

#endif
