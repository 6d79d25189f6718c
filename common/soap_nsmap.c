/* The namespace table of the qcg service: defined once for every binary. */
#include "soapH.h"
#include "qcg.nsmap"
