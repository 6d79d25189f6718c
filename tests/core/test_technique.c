/* core/technique.c: every technique's name round-trips; "none" and anything
   else do not parse. */
#include "check.h"
#include "technique.h"

int main(void)
{
    const char *techs[] = {"direct", "reversed", "traversing", "holepunch", "proxy"};
    for (int i = 0; i < 5; i++) {
        CHECK(technique_parse(techs[i]) == TECH_DIRECT + i);
        CHECK_STR(technique_name((enum technique)(TECH_DIRECT + i)), techs[i]);
    }
    CHECK(TECH_COUNT == 6);
    CHECK_STR(technique_name(TECH_NONE), "none");
    CHECK(technique_parse("none") == -1);
    CHECK(technique_parse("direct ") == -1);
    CHECK(technique_parse("Direct") == -1);
    CHECK(technique_parse("") == -1);
    CHECK(technique_parse(NULL) == -1);
    CHECK_STR(technique_name((enum technique) - 1), "unknown");
    CHECK_STR(technique_name((enum technique)TECH_COUNT), "unknown");
    return check_result("test_technique");
}
