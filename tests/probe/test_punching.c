/* Which hole punching variant qcg-probe says the helper uses (report.c): the
   helper's punch-ttl, and under auto the hop count to the reflector its last
   punch measured, on the page ("hole punching") and in --json
   ("punching"). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "probe.h"
#include "render.h"

static struct probe_opts opts = {.encrypt = QCG_ENCRYPT_INTER_SITE};
static struct probe_run run;

/* The page's line and the JSON object for punch-ttl ttl, hops, first TTL. */
static void check(int ttl, unsigned hops, unsigned first, const char *line, const char *json)
{
    memset(&run, 0, sizeof(run));
    run.opts = &opts;
    run.site.mapping = "unknown";
    run.site.in4.state = "unknown";
    run.site.info.punch_ttl = ttl;
    run.site.info.punch_hops = hops;
    run.site.info.punch_first_ttl = first;
    char *h = render(report_human, &run);
    CHECK_HAS(h, line);
    free(h);
    char *j = render(report_json, &run);
    CHECK_HAS(j, json);
    free(j);
}

int main(void)
{
    check(0, 0, 0,
          "\n  hole punching  auto: the first SYN's TTL from the hops to the reflector, which the "
          "first punch measures (none yet)\n",
          "\"punching\":{\"punch_ttl\":\"auto\",\"hops\":null,\"first_syn_ttl\":null,");
    check(0, 3, 3,
          "\n  hole punching  first SYN with TTL 3 (3 hops to the reflector; punch-ttl auto)\n",
          "\"punching\":{\"punch_ttl\":\"auto\",\"hops\":3,\"first_syn_ttl\":3,\"variant\":\"first "
          "SYN with TTL 3");
    check(0, 1, 0, "\n  hole punching  plain (1 hop to the reflector: too few; punch-ttl auto)\n",
          "\"punching\":{\"punch_ttl\":\"auto\",\"hops\":1,\"first_syn_ttl\":null,");
    check(-1, 0, 0,
          "\n  hole punching  plain: the first SYN with the normal TTL (punch-ttl plain)\n",
          "\"punching\":{\"punch_ttl\":\"plain\",\"hops\":null,\"first_syn_ttl\":null,");
    check(5, 0, 0, "\n  hole punching  first SYN with TTL 5 (punch-ttl 5)\n",
          "\"punching\":{\"punch_ttl\":\"5\",\"hops\":null,\"first_syn_ttl\":5,");
    return check_result("probe-punching");
}
