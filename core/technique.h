/* The connection techniques: the one enum every component uses (plans, the
   local protocol's technique fields, logs, --json).  libqcgconn's public
   enum qcg_technique has the same values (asserted in libqcgconn/error.c). */
#ifndef QCG_TECHNIQUE_H
#define QCG_TECHNIQUE_H

/* In preference order. */
enum technique {
    TECH_NONE,
    TECH_DIRECT,
    TECH_REVERSED,
    TECH_TRAVERSING,
    TECH_HOLEPUNCH,
    TECH_PROXY
};

#define TECH_COUNT (TECH_PROXY + 1)

/* "direct", "reversed"...; "none"; "unknown" outside the enum. */
const char *technique_name(enum technique t);
/* The technique a name stands for, -1 if unknown ("none" included). */
int technique_parse(const char *name);

#endif
