/* libqcgcolour against the environment a launch gives a rank: the colours,
   the integers a site's ranks agree on, and every refusal of a malformed or
   missing variable (a rank must never get a wrong integer quietly). */
#include <stdlib.h>

#include "check.h"
#include "qcgcolour.h"

static void set(const char *site, const char *node, const char *sites, const char *nodes)
{
    const char *name[] = {"QCG_COLOUR_SITE", "QCG_COLOUR_NODE", "QCG_COLOURS_SITE",
                          "QCG_COLOURS_NODE"};
    const char *value[] = {site, node, sites, nodes};

    for (int i = 0; i < 4; i++) {
        if (value[i] != NULL)
            setenv(name[i], value[i], 1);
        else
            unsetenv(name[i]);
    }
}

static void test_levels(void)
{
    CHECK_EQ(qcg_colour_depth(), 2);
    CHECK_STR(qcg_colour_level_name(QCG_COLOUR_SITE), "site");
    CHECK_STR(qcg_colour_level_name(QCG_COLOUR_NODE), "node");
    CHECK(qcg_colour_level_name(2) == NULL);
    CHECK(qcg_colour_level_name(-1) == NULL);
}

/* The lab's five sites: each rank's integer is its site's place in the
   sorted list, whatever order the ranks ask in. */
static void test_lab_job(void)
{
    const char *sites = "fw,nata,natb,open,sym";
    const char *site[] = {"fw", "nata", "natb", "open", "sym"};
    char buf[64];

    for (int i = 0; i < 5; i++) {
        set(site[i], "n1", sites, "fw1,n1,open2");
        CHECK_EQ(qcg_colour_string(QCG_COLOUR_SITE, buf, sizeof(buf)), 0);
        CHECK_STR(buf, site[i]);
        CHECK_EQ(qcg_colour_int(QCG_COLOUR_SITE), i);
        CHECK_EQ(qcg_colour_count(QCG_COLOUR_SITE), 5);
        CHECK_EQ(qcg_colour_to_int(QCG_COLOUR_SITE, site[4 - i]), 4 - i);
        CHECK_EQ(qcg_colour_int(QCG_COLOUR_NODE), 1);
        CHECK_EQ(qcg_colour_count(QCG_COLOUR_NODE), 3);
    }
    set("open", "open1", "open", "open1");
    CHECK_EQ(qcg_colour_count(QCG_COLOUR_SITE), 1);
    CHECK_EQ(qcg_colour_int(QCG_COLOUR_SITE), 0);
    CHECK_EQ(qcg_colour_to_int(QCG_COLOUR_SITE, "fw"), QCG_COLOUR_ENOTFOUND);
    CHECK_EQ(qcg_colour_to_int(QCG_COLOUR_SITE, NULL), QCG_COLOUR_ENOTFOUND);
}

static void test_refusals(void)
{
    char buf[64], tiny[4];
    /* Unsorted, repeated, empty entries, bad characters, a name of 64. */
    const char *bad_lists[] = {"nata,fw",  "fw,fw",   "fw,,open", ",fw",       "fw,",
                               "fw,na ta", "fw;open", "-fw",      "fw,open/1", ""};
    char longname[80];

    set(NULL, NULL, NULL, NULL);
    CHECK_EQ(qcg_colour_string(QCG_COLOUR_SITE, buf, sizeof(buf)), QCG_COLOUR_EUNSET);
    CHECK_EQ(qcg_colour_int(QCG_COLOUR_SITE), QCG_COLOUR_EUNSET);
    CHECK_EQ(qcg_colour_count(QCG_COLOUR_NODE), QCG_COLOUR_EUNSET);
    /* The rank's own colour without the job's list: the string, no integer. */
    set("nata", "nata1", NULL, NULL);
    CHECK_EQ(qcg_colour_string(QCG_COLOUR_SITE, buf, sizeof(buf)), 0);
    CHECK_EQ(qcg_colour_int(QCG_COLOUR_SITE), QCG_COLOUR_EUNSET);
    CHECK_EQ(qcg_colour_string(QCG_COLOUR_SITE, tiny, sizeof(tiny)), QCG_COLOUR_ERANGE);
    CHECK_EQ(qcg_colour_string(QCG_COLOUR_SITE, NULL, 0), QCG_COLOUR_ERANGE);
    CHECK_EQ(qcg_colour_string(2, buf, sizeof(buf)), QCG_COLOUR_ELEVEL);
    CHECK_EQ(qcg_colour_int(-1), QCG_COLOUR_ELEVEL);
    CHECK_EQ(qcg_colour_count(7), QCG_COLOUR_ELEVEL);
    for (size_t i = 0; i < sizeof(bad_lists) / sizeof(bad_lists[0]); i++) {
        set("fw", "fw1", bad_lists[i], "fw1");
        int want = bad_lists[i][0] == '\0' ? QCG_COLOUR_EUNSET : QCG_COLOUR_EINVAL;
        CHECKF(qcg_colour_count(QCG_COLOUR_SITE) == want, "list '%s'", bad_lists[i]);
        CHECKF(qcg_colour_int(QCG_COLOUR_SITE) == want, "list '%s'", bad_lists[i]);
    }
    memset(longname, 'a', 64);
    longname[64] = '\0';
    set(longname, "n", "a,b", "n");
    CHECK_EQ(qcg_colour_string(QCG_COLOUR_SITE, buf, sizeof(buf)), QCG_COLOUR_EINVAL);
    set("fw", "n", longname, "n");
    CHECK_EQ(qcg_colour_count(QCG_COLOUR_SITE), QCG_COLOUR_EINVAL);
    /* A rank whose site the list does not name (a wrong site= in the host
       list) gets no integer rather than another site's. */
    set("sym", "sym1", "fw,nata", "sym1");
    CHECK_EQ(qcg_colour_int(QCG_COLOUR_SITE), QCG_COLOUR_ENOTFOUND);
    CHECK_HAS(qcg_colour_strerror(QCG_COLOUR_ENOTFOUND), "site");
    CHECK_HAS(qcg_colour_strerror(QCG_COLOUR_EUNSET), "qcg-mpirun");
    CHECK_STR(qcg_colour_strerror(12345), "unknown error");
}

int main(void)
{
    test_levels();
    test_lab_job();
    test_refusals();
    return check_result("colour");
}
