/* colours: every rank's colours (libqcgcolour) agree with every other's.
   Before MPI_Init each rank reads its site and node, their integers and the
   counts; after it the same calls must give the same answers.  Then all
   ranks exchange them: one integer per distinct name, 0..N-1, N the number
   of distinct names the job has at that level, and MPI_Comm_split by the
   site integer gives communicators holding exactly one site's ranks.  Each
   rank prints "colour RANK SITE NODE" (the lab test checks the names
   against the nodes it started ranks on).

     qcg-mpi-colours [--expect-sites N] */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpitest.h"
#include "qcgcolour.h"

#define NAME 64

struct colours {
    char name[2][NAME];
    int value[2], count[2];
};

static int read_colours(struct colours *c)
{
    /* Compared whole (memcmp): the bytes after each name's NUL too. */
    memset(c, 0, sizeof(*c));
    for (int l = 0; l < 2; l++) {
        int rc = qcg_colour_string(l, c->name[l], NAME);

        if (rc < 0) {
            fprintf(stderr, "colour %s: %s\n", qcg_colour_level_name(l), qcg_colour_strerror(rc));
            return -1;
        }
        c->value[l] = qcg_colour_int(l);
        c->count[l] = qcg_colour_count(l);
        if (c->value[l] < 0 || c->count[l] < 0) {
            fprintf(stderr, "colour %s: %s\n", qcg_colour_level_name(l),
                    qcg_colour_strerror(c->value[l] < 0 ? c->value[l] : c->count[l]));
            return -1;
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    struct colours before, after, *all;
    int rank, size, expect_sites = 0, ok_before;
    MPI_Comm site;

    ok_before = read_colours(&before) == 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--expect-sites") == 0 && i + 1 < argc)
            expect_sites = atoi(argv[++i]);
    }
    if (!ok_before || read_colours(&after) < 0) {
        mt_error(rank, "no colours (see above)");
        memset(&after, 0, sizeof(after));
    } else if (memcmp(&before, &after, sizeof(before)) != 0) {
        mt_error(rank, "the colours changed across MPI_Init");
    }
    if (qcg_colour_depth() != 2)
        mt_error(rank, "depth %d, not 2", qcg_colour_depth());
    printf("colour %d %s %s\n", rank, after.name[0], after.name[1]);
    fflush(stdout);

    all = mt_alloc((size_t)size * sizeof(*all));
    MPI_Allgather(&after, (int)sizeof(after), MPI_BYTE, all, (int)sizeof(after), MPI_BYTE,
                  MPI_COMM_WORLD);
    for (int l = 0; l < 2; l++) {
        int distinct = 0;

        for (int i = 0; i < size; i++) {
            int first = 1;

            if (all[i].count[l] != after.count[l])
                mt_error(rank, "%s count %d here, %d at rank %d", qcg_colour_level_name(l),
                         after.count[l], all[i].count[l], i);
            if (all[i].value[l] < 0 || all[i].value[l] >= after.count[l])
                mt_error(rank, "rank %d's %s integer %d is not in 0..%d", i,
                         qcg_colour_level_name(l), all[i].value[l], after.count[l] - 1);
            for (int j = 0; j < i; j++) {
                int same_name = strcmp(all[i].name[l], all[j].name[l]) == 0;

                if (same_name != (all[i].value[l] == all[j].value[l]))
                    mt_error(rank, "ranks %d (%s = %d) and %d (%s = %d) disagree", i,
                             all[i].name[l], all[i].value[l], j, all[j].name[l], all[j].value[l]);
                if (same_name)
                    first = 0;
            }
            distinct += first;
        }
        if (distinct != after.count[l])
            mt_error(rank, "%d distinct %ss among the ranks, the count says %d", distinct,
                     qcg_colour_level_name(l), after.count[l]);
    }
    if (expect_sites > 0 && after.count[0] != expect_sites)
        mt_error(rank, "%d sites, expected %d", after.count[0], expect_sites);

    /* One communicator per site: its members are exactly the ranks of the
       site, in world order. */
    MPI_Comm_split(MPI_COMM_WORLD, after.value[0], rank, &site);
    {
        int n, mine = 0, *members, *world;
        MPI_Group g, wg;

        MPI_Comm_size(site, &n);
        for (int i = 0; i < size; i++)
            mine += strcmp(all[i].name[0], after.name[0]) == 0;
        if (n != mine)
            mt_error(rank, "the communicator of site %s has %d ranks, the site %d", after.name[0],
                     n, mine);
        members = mt_alloc((size_t)n * sizeof(int));
        world = mt_alloc((size_t)n * sizeof(int));
        for (int i = 0; i < n; i++)
            members[i] = i;
        MPI_Comm_group(site, &g);
        MPI_Comm_group(MPI_COMM_WORLD, &wg);
        MPI_Group_translate_ranks(g, n, members, wg, world);
        for (int i = 0; i < n; i++) {
            if (strcmp(all[world[i]].name[0], after.name[0]) != 0)
                mt_error(rank, "world rank %d (site %s) is in site %s's communicator", world[i],
                         all[world[i]].name[0], after.name[0]);
        }
        MPI_Group_free(&g);
        MPI_Group_free(&wg);
        free(members);
        free(world);
    }
    MPI_Comm_free(&site);
    free(all);
    {
        int rc = mt_verdict("colours", "%d sites, %d nodes", after.count[0], after.count[1]);

        MPI_Finalize();
        return rc;
    }
}
