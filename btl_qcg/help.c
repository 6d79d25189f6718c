/* show_help for btl_qcg: where our help file is, and the opt-out messages
   (loud only when the user asked for qcg, so a default btl selection on a
   machine without the grid stays quiet). */
#include "help.h"
#include "btl_qcg.h"

#include <dlfcn.h>
#include <libgen.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "opal/mca/base/base.h"
#include "opal/mca/btl/base/base.h"
#include "opal/util/argv.h"
#include "opal/util/proc.h"
#include "opal/util/show_help.h"

void btl_qcg_help_init(void)
{
    Dl_info info;
    char path[4096];

    /* show_help searches Open MPI's data directory (dpkg's) and the
       directories added here: the one this module was loaded from, in the
       build tree as once installed. */
    if (dladdr(&mca_btl_qcg_component, &info) == 0 || info.dli_fname == NULL)
        return;
    snprintf(path, sizeof(path), "%s", info.dli_fname);
    (void)opal_show_help_add_dir(dirname(path));
}

/* Did the user name qcg in the btl list (--mca btl ...,qcg or
   OMPI_MCA_btl)?  "^qcg,..." excludes, and no list is the default. */
static bool qcg_requested(void)
{
    char **names = NULL;
    bool include = false, named = false;

    if (mca_base_component_parse_requested(opal_btl_base_framework.framework_selection, &include,
                                           &names) != OPAL_SUCCESS)
        return false;
    for (int i = 0; include && names != NULL && names[i] != NULL; i++)
        named = named || strcmp(names[i], "qcg") == 0;
    opal_argv_free(names);
    return named;
}

void btl_qcg_opt_out(const char *topic, bool loud, const char *fmt, ...)
{
    char detail[1024];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(detail, sizeof(detail), fmt, ap);
    va_end(ap);
    if (loud || qcg_requested())
        opal_show_help(BTL_QCG_HELP_FILE, topic, true, opal_process_info.nodename,
                       (int)OPAL_PROC_MY_NAME.vpid, detail);
    else
        btl_qcg_log(1, "not used: %s", detail);
}
