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

/* What a connect tried and reports (a lookup's `tried`, a report's
   technique, the broker's memory): a technique, or hole punching over IPv6
   alone, "holepunch6", whose failure leaves the IPv4 punch to try.  Its
   bit (1 << TECH_PUNCH6) rides with the techniques' in tried masks; the
   plain "holepunch" then means over IPv4, or either family from a helper
   that predates the split. */
#define TECH_PUNCH6 TECH_COUNT
#define TECH_ATTEMPTS (TECH_PUNCH6 + 1)

/* "direct", "reversed"...; "none"; "unknown" outside the enum. */
const char *technique_name(enum technique t);
/* The technique a name stands for, -1 if unknown ("none" included). */
int technique_parse(const char *name);
/* The same for what was tried: technique_name's, or "holepunch6" for
   TECH_PUNCH6; attempt_parse takes those, -1 for anything else. */
const char *attempt_name(int a);
int attempt_parse(const char *name);

#endif
