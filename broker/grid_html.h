/* `qcg-broker --grid --html FILE`: the grid's picture as one self-contained
   HTML page an admin opens in a browser (no network, no external file): the
   clusters in a circle coloured by their NAT/firewall kind, an arrow for each
   ordered cluster pair coloured by the technique that last worked there, and
   a matrix of the same pairs with their setup time and success ratio. */
#ifndef BROKER_GRID_HTML_H
#define BROKER_GRID_HTML_H

#include <stdint.h>
#include <stdio.h>

struct qcg__gridResponse;

/* now: unix seconds the ages are counted to and the page is dated with. */
void grid_html(FILE *out, const struct qcg__gridResponse *g, uint64_t now);

#endif
