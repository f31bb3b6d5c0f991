/* cudaError_t names and descriptions from the generated table (the wire's one error numbering). */
#include <stdio.h>

#include "pv_state.h"

static const struct pv_error_desc *find_error(cudaError_t e)
{
    for (int i = 0; i < PV_ERROR_TABLE_LEN; i++)
        if (pv_error_table[i].code == e)
            return &pv_error_table[i];
    return NULL;
}

const char *pv_err_name(cudaError_t e)
{
    static _Thread_local char buf[32];
    const struct pv_error_desc *d = find_error(e);
    if (d)
        return d->name;
    snprintf(buf, sizeof buf, "error %d", e);
    return buf;
}

const char *pv_err_text(cudaError_t e)
{
    const struct pv_error_desc *d = find_error(e);
    return d ? d->text : NULL;
}
