/* This node's shortages; see shortage.h. */
#include "shortage.h"

#include <errno.h>

bool local_shortage(int err)
{
    return err == EADDRNOTAVAIL || err == EMFILE || err == ENFILE || err == ENOBUFS ||
           err == ENOMEM;
}
