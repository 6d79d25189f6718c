/* Callbacks into the PML (send completions, the error callback) are owed
   while the state lock is held and made after it is released: a callback
   may take a PML lock that another thread holds while it waits for our
   state lock in btl_send, and it may send itself.  Every release of the
   state lock goes through btl_qcg_unlock, so nothing owed is left behind:
   whoever releases it next makes the callbacks, in the order owed. */
#include "btl_qcg.h"

#include <stdlib.h>
#include <string.h>

#include "opal/util/output.h"

void btl_qcg_lock(struct btl_qcg_module *m)
{
    OPAL_THREAD_LOCK(&m->lock);
}

void btl_qcg_defer_completion(struct btl_qcg_module *m, struct btl_qcg_frag *frag, int status)
{
    frag->status = status;
    frag->next = NULL;
    if (m->done_tail != NULL)
        m->done_tail->next = frag;
    else
        m->done_head = frag;
    m->done_tail = frag;
}

void btl_qcg_defer_error(struct btl_qcg_module *m, struct opal_proc_t *proc, const char *text)
{
    size_t len = strlen(text) + 1;
    struct btl_qcg_error *e = malloc(sizeof(*e) + len);

    if (e == NULL) {
        /* Not even the callback's text: at least the user sees it. */
        opal_output(0, "%s", text);
        return;
    }
    e->proc = proc;
    memcpy(e->text, text, len);
    e->next = m->errors;
    m->errors = e;
}

static void complete(struct btl_qcg_module *m, struct btl_qcg_frag *frag)
{
    mca_btl_base_completion_fn_t cb = frag->base.des_cbfunc;
    /* Read first: a frag the PML owns may be gone after its callback. */
    bool owned = (frag->base.des_flags & MCA_BTL_DES_FLAGS_BTL_OWNERSHIP) != 0;

    if (cb != NULL)
        cb(&m->super, (struct mca_btl_base_endpoint_t *)frag->endpoint, &frag->base, frag->status);
    if (owned)
        btl_qcg_frag_release(m, frag);
}

void btl_qcg_unlock(struct btl_qcg_module *m)
{
    struct btl_qcg_frag *done = m->done_head;
    struct btl_qcg_error *errors = m->errors;

    m->done_head = m->done_tail = NULL;
    m->errors = NULL;
    OPAL_THREAD_UNLOCK(&m->lock);
    /* The error first (ob1 aborts the job), then the sends it failed. */
    while (errors != NULL) {
        struct btl_qcg_error *e = errors;

        errors = e->next;
        if (m->error_cb != NULL)
            m->error_cb(&m->super, MCA_BTL_ERROR_FLAGS_FATAL, e->proc, e->text);
        free(e);
    }
    while (done != NULL) {
        struct btl_qcg_frag *frag = done;

        done = frag->next;
        frag->next = NULL;
        complete(m, frag);
    }
}
