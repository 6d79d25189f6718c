/* See grid_html.h. */
#include "grid_html.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>
#include <time.h>

#include "grid_query.h"
#include "soapH.h"

#define NODE_R 44.0
#define MARGIN 175.0

/* What the outcomes say about one ordered pair of clusters. */
struct pair_view {
    const struct qcg__outcome *last_ok; /* the technique that worked last, or NULL */
    unsigned long long ok, attempts;    /* over every technique */
    bool any;
};

static const char *or_dash(const char *s)
{
    return s != NULL && s[0] != '\0' ? s : "-";
}

/* Text and attribute values: every name comes from a frontend's registration. */
static void esc(FILE *out, const char *s)
{
    for (s = or_dash(s); *s != '\0'; s++) {
        switch (*s) {
        case '&':
            fputs("&amp;", out);
            break;
        case '<':
            fputs("&lt;", out);
            break;
        case '>':
            fputs("&gt;", out);
            break;
        case '"':
            fputs("&quot;", out);
            break;
        case '\'':
            fputs("&#39;", out);
            break;
        default:
            fputc(*s, out);
        }
    }
}

static bool same(const char *a, const char *b)
{
    return a != NULL && b != NULL && strcmp(a, b) == 0;
}

static struct pair_view pair_of(const struct qcg__gridResponse *g, const char *from, const char *to)
{
    struct pair_view v = {0};
    for (int i = 0; g->outcome != NULL && i < g->__sizeOutcome; i++) {
        const struct qcg__outcome *o = &g->outcome[i];
        if (!same(o->from, from) || !same(o->to, to))
            continue;
        v.any = true;
        v.ok += (unsigned long long)o->ok;
        v.attempts += (unsigned long long)(o->ok + o->failed);
        if (grid_newer_ok(o, v.last_ok))
            v.last_ok = o;
    }
    return v;
}

/* Colours: the kinds from open (green) to symmetric NAT (red); the
   techniques in the broker's preference order, the proxy last. */
static const char *kind_colour(const char *kind)
{
    static const char *const kinds[][2] = {
        {"open", "#c8e6c9"}, {"firewalled", "#fff3b0"}, {"nat", "#bbdefb"}, {"symnat", "#ffcdd2"}};
    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
        if (same(kind, kinds[i][0]))
            return kinds[i][1];
    return "#e0e0e0";
}

static const char *technique_colour(const char *t)
{
    static const char *const techs[][2] = {{"direct", "#2e7d32"},     {"reversed", "#1565c0"},
                                           {"traversing", "#6a1b9a"}, {"holepunch", "#ef6c00"},
                                           {"holepunch6", "#ef6c00"}, {"proxy", "#b71c1c"}};
    for (size_t i = 0; i < sizeof(techs) / sizeof(techs[0]); i++)
        if (same(t, techs[i][0]))
            return techs[i][1];
    return "#9e9e9e";
}

static unsigned percent(const struct pair_view *v)
{
    return v->attempts > 0 ? (unsigned)(v->ok * 100 / v->attempts) : 0;
}

/* "holepunch 74 ms, 9/10 ok (90%)" or "failed: 0/3 ok". */
static void pair_summary(FILE *out, const struct pair_view *v)
{
    if (v->last_ok != NULL) {
        esc(out, v->last_ok->technique);
        fprintf(out, " %d ms, ", v->last_ok->lastSetupMs);
    } else {
        fputs("failed: ", out);
    }
    fprintf(out, "%llu/%llu ok (%u%%)", v->ok, v->attempts, percent(v));
}

static void style(FILE *out)
{
    fputs("<style>\n"
          "body{font:14px sans-serif;margin:1.5em;color:#212121}\n"
          "h1{font-size:1.4em}\n"
          "svg text{font-family:sans-serif}\n"
          ".cluster text{text-anchor:middle}\n"
          ".pair text{font-size:11px;paint-order:stroke;stroke:#fff;stroke-width:3px}\n"
          ".pair.failed path{stroke-dasharray:6 4}\n"
          "svg.focus .pair{opacity:.12}\n"
          "svg.focus .pair.on{opacity:1}\n"
          "table{border-collapse:collapse;margin:1em 0}\n"
          "td,th{border:1px solid #bdbdbd;padding:4px 8px;text-align:left;vertical-align:top}\n"
          "th{background:#f5f5f5}\n"
          ".mismatch{color:#b71c1c;font-weight:bold}\n"
          ".legend span{display:inline-block;margin-right:1em}\n"
          ".swatch{display:inline-block;width:1em;height:1em;border:1px solid #757575;"
          "vertical-align:middle;margin-right:.3em}\n"
          "</style>\n",
          out);
}

static void legend(FILE *out)
{
    static const char *const kinds[] = {"open", "firewalled", "nat", "symnat"};
    static const char *const techs[] = {"direct", "reversed", "traversing", "holepunch", "proxy"};
    fputs("<p class=\"legend\">kind: ", out);
    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
        fprintf(out, "<span><i class=\"swatch\" style=\"background:%s\"></i>%s</span>",
                kind_colour(kinds[i]), kinds[i]);
    fputs("<br>technique that last worked: ", out);
    for (size_t i = 0; i < sizeof(techs) / sizeof(techs[0]); i++)
        fprintf(out, "<span><i class=\"swatch\" style=\"background:%s\"></i>%s</span>",
                technique_colour(techs[i]), techs[i]);
    fputs("<span>dashed grey: every technique tried last failed</span></p>\n", out);
}

/* A pair's arrow along the path d, its label centred at (lx,ly). */
static void pair_arrow(FILE *out, const char *from, const char *to, const struct pair_view *v,
                       const char *d, double lx, double ly)
{
    const char *t = v->last_ok != NULL ? v->last_ok->technique : NULL;
    const char *colour = t != NULL ? technique_colour(t) : "#9e9e9e";
    fputs("<g class=\"pair", out);
    fputs(t != NULL ? "\"" : " failed\"", out);
    fputs(" data-from=\"", out);
    esc(out, from);
    fputs("\" data-to=\"", out);
    esc(out, to);
    fputs("\" data-technique=\"", out);
    esc(out, t != NULL ? t : "none");
    fputs("\"><title>", out);
    esc(out, from);
    fputs(" \xe2\x86\x92 ", out);
    esc(out, to);
    fputs(": ", out);
    pair_summary(out, v);
    fprintf(out,
            "</title><path d=\"%s\" fill=\"none\" stroke=\"%s\" stroke-width=\"2.5\" "
            "marker-end=\"url(#arrow-%s)\"/>",
            d, colour, t != NULL ? t : "none");
    fprintf(out, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"%s\">", lx, ly + 4,
            colour);
    if (t != NULL) {
        esc(out, t);
        fprintf(out, " %d ms %u%%", v->last_ok->lastSetupMs, percent(v));
    } else {
        fprintf(out, "failed %u%%", percent(v));
    }
    fputs("</text></g>\n", out);
}

/* From one cluster to another: an arc bent to its right, so that the two
   directions of a pair are two arcs; the label at the arc's middle. */
static void between(FILE *out, const char *from, const char *to, const struct pair_view *v,
                    double x1, double y1, double x2, double y2)
{
    double dx = x2 - x1, dy = y2 - y1, len = sqrt(dx * dx + dy * dy);
    if (len < 1)
        return;
    double ux = dx / len, uy = dy / len, bend = len * 0.24;
    double sx = x1 + ux * NODE_R, sy = y1 + uy * NODE_R;
    double ex = x2 - ux * (NODE_R + 4), ey = y2 - uy * (NODE_R + 4);
    double cx = (x1 + x2) / 2 - uy * bend, cy = (y1 + y2) / 2 + ux * bend;
    char d[160];
    snprintf(d, sizeof(d), "M%.1f %.1f Q%.1f %.1f %.1f %.1f", sx, sy, cx, cy, ex, ey);
    pair_arrow(out, from, to, v, d, (sx + 2 * cx + ex) / 4, (sy + 2 * cy + ey) / 4);
}

/* Within one cluster (nodes of a site to each other): a loop on the
   circle's outer side, angle a pointing away from the picture's centre. */
static void within(FILE *out, const char *name, const struct pair_view *v, double x, double y,
                   double a)
{
    double s = 0.5, c = 0.65, far = 2.5 * NODE_R;
    char d[200];
    snprintf(d, sizeof(d), "M%.1f %.1f C%.1f %.1f %.1f %.1f %.1f %.1f", x + NODE_R * cos(a - s),
             y + NODE_R * sin(a - s), x + far * cos(a - c), y + far * sin(a - c),
             x + far * cos(a + c), y + far * sin(a + c), x + (NODE_R + 4) * cos(a + s),
             y + (NODE_R + 4) * sin(a + s));
    pair_arrow(out, name, name, v, d, x + 2.35 * NODE_R * cos(a), y + 2.35 * NODE_R * sin(a));
}

static void cluster_node(FILE *out, const struct qcg__gridCluster *c, double x, double y)
{
    const char *kind = c->declared.kind;
    const char *seen = c->observed != NULL ? c->observed->kind : NULL;
    bool differs = grid_cluster_mismatch(c);
    fputs("<g class=\"cluster\" data-cluster=\"", out);
    esc(out, c->declared.name);
    fputs("\" data-kind=\"", out);
    esc(out, kind);
    fputs("\"><title>", out);
    esc(out, c->declared.name);
    fprintf(out, ": declared %s, %d node%s, ", or_dash(kind), c->nodes, c->nodes == 1 ? "" : "s");
    if (seen != NULL) {
        fputs("observed ", out);
        esc(out, seen);
    } else {
        fputs("not probed", out);
    }
    fprintf(out,
            "</title><circle cx=\"%.1f\" cy=\"%.1f\" r=\"%.0f\" fill=\"%s\" stroke=\"%s\" "
            "stroke-width=\"%d\"/>",
            x, y, NODE_R, kind_colour(kind), differs ? "#b71c1c" : "#616161", differs ? 3 : 1);
    fprintf(out, "<text x=\"%.1f\" y=\"%.1f\" font-weight=\"bold\">", x, y - 6);
    esc(out, c->declared.name);
    fprintf(out, "</text><text x=\"%.1f\" y=\"%.1f\" font-size=\"12\">", x, y + 10);
    esc(out, kind);
    if (differs) {
        fputs(" (seen ", out);
        esc(out, seen);
        fputs(seen != NULL && kind != NULL && strcmp(seen, kind) == 0 ? ", other address)" : ")",
              out);
    }
    fprintf(out, "</text><text x=\"%.1f\" y=\"%.1f\" font-size=\"11\">%d node%s</text></g>\n", x,
            y + 24, c->nodes, c->nodes == 1 ? "" : "s");
}

static void picture(FILE *out, const struct qcg__gridResponse *g, int nc)
{
    double r = nc <= 1 ? 0 : fmax(160.0, 34.0 * nc);
    double size = 2 * (r + MARGIN), mid = size / 2;
    double x[nc > 0 ? nc : 1], y[nc > 0 ? nc : 1], a[nc > 0 ? nc : 1];
    for (int i = 0; i < nc; i++) {
        a[i] = nc == 1 ? M_PI / 2 : -M_PI / 2 + 2 * M_PI * i / nc;
        x[i] = mid + r * cos(a[i]);
        y[i] = mid + r * sin(a[i]);
    }
    fprintf(out,
            "<svg id=\"grid\" xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" "
            "height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" role=\"img\" "
            "aria-label=\"clusters and the techniques between them\">\n<defs>",
            size, size, size, size);
    static const char *const techs[] = {"direct",     "reversed", "traversing", "holepunch",
                                        "holepunch6", "proxy",    "none"};
    for (size_t i = 0; i < sizeof(techs) / sizeof(techs[0]); i++)
        fprintf(out,
                "<marker id=\"arrow-%s\" viewBox=\"0 0 10 10\" refX=\"9\" refY=\"5\" "
                "markerWidth=\"7\" markerHeight=\"7\" orient=\"auto\"><path d=\"M0 0L10 5L0 "
                "10z\" fill=\"%s\"/></marker>",
                techs[i], technique_colour(techs[i]));
    fputs("</defs>\n", out);
    for (int i = 0; i < nc; i++) {
        for (int j = 0; j < nc; j++) {
            const char *from = g->cluster[i].declared.name, *to = g->cluster[j].declared.name;
            struct pair_view v = pair_of(g, from, to);
            if (v.any && i != j)
                between(out, from, to, &v, x[i], y[i], x[j], y[j]);
            else if (v.any)
                within(out, from, &v, x[i], y[i], a[i]);
        }
    }
    for (int i = 0; i < nc; i++)
        cluster_node(out, &g->cluster[i], x[i], y[i]);
    fputs("</svg>\n", out);
}

static void clusters_table(FILE *out, const struct qcg__gridResponse *g, int nc, uint64_t now)
{
    fputs("<h2>Clusters</h2>\n<table id=\"clusters\"><tr><th>cluster</th><th>declared</th>"
          "<th>public addresses</th><th>nodes</th><th>observed by qcg-probe</th></tr>\n",
          out);
    for (int i = 0; i < nc; i++) {
        const struct qcg__gridCluster *c = &g->cluster[i];
        const struct qcg__observation *o = c->observed;
        fputs("<tr data-cluster=\"", out);
        esc(out, c->declared.name);
        fputs("\"><td>", out);
        esc(out, c->declared.name);
        fputs("</td><td>", out);
        esc(out, c->declared.kind);
        fputs("</td><td>", out);
        for (int k = 0; k < c->declared.__sizePublicAddress; k++) {
            fputs(k > 0 ? ", " : "", out);
            esc(out, c->declared.publicAddress[k]);
        }
        fprintf(out, "</td><td>%d</td><td>", c->nodes);
        if (o == NULL) {
            fputs("not probed", out);
        } else {
            esc(out, o->kind);
            fputs(" from ", out);
            esc(out, o->publicAddress);
            fputs(", mapping ", out);
            esc(out, o->mapping);
            fputs(", inbound ", out);
            esc(out, o->inbound);
            fputs(", by ", out);
            esc(out, o->node);
            fprintf(out, " %llu s ago",
                    (unsigned long long)(now > (uint64_t)o->when ? now - (uint64_t)o->when : 0));
            if (grid_cluster_mismatch(c))
                fputs(" <span class=\"mismatch\">differs from the declaration</span>", out);
        }
        fputs("</td></tr>\n", out);
    }
    fputs("</table>\n", out);
}

/* Rows from, columns to: what worked last, its setup time, the ratio over
   every attempt, and the techniques whose last attempt failed. */
static void matrix(FILE *out, const struct qcg__gridResponse *g, int nc)
{
    fputs("<h2>Techniques between clusters</h2>\n<p>Rows: from; columns: to. The technique that "
          "last worked and its setup time; successes over attempts of every technique; "
          "&#x2717; marks a technique whose last attempt failed.</p>\n"
          "<table id=\"pairs\"><tr><th>from \\ to</th>",
          out);
    for (int j = 0; j < nc; j++) {
        fputs("<th>", out);
        esc(out, g->cluster[j].declared.name);
        fputs("</th>", out);
    }
    fputs("</tr>\n", out);
    for (int i = 0; i < nc; i++) {
        const char *from = g->cluster[i].declared.name;
        fputs("<tr><th>", out);
        esc(out, from);
        fputs("</th>", out);
        for (int j = 0; j < nc; j++) {
            const char *to = g->cluster[j].declared.name;
            struct pair_view v = pair_of(g, from, to);
            if (!v.any) {
                fputs("<td>-</td>", out);
                continue;
            }
            fputs("<td data-from=\"", out);
            esc(out, from);
            fputs("\" data-to=\"", out);
            esc(out, to);
            fputs("\">", out);
            if (v.last_ok != NULL) {
                fprintf(out, "<b style=\"color:%s\">", technique_colour(v.last_ok->technique));
                esc(out, v.last_ok->technique);
                fprintf(out, "</b> %d ms<br>", v.last_ok->lastSetupMs);
            }
            fprintf(out, "%llu/%llu ok (%u%%)", v.ok, v.attempts, percent(&v));
            for (int k = 0; k < g->__sizeOutcome; k++) {
                const struct qcg__outcome *o = &g->outcome[k];
                if (same(o->from, from) && same(o->to, to) && !o->lastOk) {
                    fputs("<br>&#x2717; ", out);
                    esc(out, o->technique);
                    fprintf(out, " (%llu failed)", (unsigned long long)o->failed);
                }
            }
            fputs("</td>", out);
        }
        fputs("</tr>\n", out);
    }
    fputs("</table>\n", out);
}

/* Pointing at a cluster dims every arrow but its own. */
static void script(FILE *out)
{
    fputs("<script>\n"
          "const svg = document.getElementById('grid');\n"
          "for (const c of svg.querySelectorAll('.cluster')) {\n"
          "  const name = c.dataset.cluster;\n"
          "  c.addEventListener('mouseenter', () => {\n"
          "    svg.classList.add('focus');\n"
          "    for (const p of svg.querySelectorAll('.pair'))\n"
          "      p.classList.toggle('on', p.dataset.from === name || p.dataset.to === name);\n"
          "  });\n"
          "  c.addEventListener('mouseleave', () => svg.classList.remove('focus'));\n"
          "}\n"
          "</script>\n",
          out);
}

void grid_html(FILE *out, const struct qcg__gridResponse *g, uint64_t now)
{
    int nc = g->cluster != NULL ? g->__sizeCluster : 0;
    char when[64];
    time_t t = (time_t)now;
    struct tm tm;
    strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S UTC", gmtime_r(&t, &tm));
    fputs("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
          "<title>qcg-connect grid</title>\n",
          out);
    style(out);
    fprintf(out,
            "</head><body>\n<h1>qcg-connect grid: %d cluster%s</h1>\n<p>From the broker at "
            "%s. Point at a cluster to see only its pairs; hover an arrow for its figures.</p>\n",
            nc, nc == 1 ? "" : "s", when);
    legend(out);
    picture(out, g, nc);
    clusters_table(out, g, nc, now);
    matrix(out, g, nc);
    script(out);
    fputs("</body></html>\n", out);
}
