// report.c — the run report of `ftc run --report DIR` (or of --save DIR): DIR/run.jsonl, a
// record per step appended as the step ends (one write a line, so a killed run leaves
// whole records), and DIR/run.html, one self-contained page (inline SVG, no script,
// nothing fetched) with the loss and eval curves, throughput, learning rate, gradient
// norm, loss scale and the plan's memory against the measured; written aside and renamed
// into place, so it is always a whole page. A resumed run keeps the records up to its
// checkpoint's step and goes on after them. As a listener of a training session's events
// (session.h) it opens before step one and writes a record as each step ends.
#include "session.h"
#include "fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct RunReport {
    char jsonl[4200], html[4200];
    int fd;                 // run.jsonl, appending
    RunReportInfo info;     // its strings our own copies
    RunRecord *rec;
    int n, cap;
    int64_t measured_bytes; // 0: not measured
    char measured_what[160];
    char *failed;           // why the run ended with an error (rt_report_failed), or NULL
};

static char *dup_or_null(const char *s) { return s ? xstrdup(s) : NULL; }

static void put_num(char *buf, size_t cap, size_t *at, const char *key, double v, const char *fmt) {
    if (*at >= cap)
        return;
    if (!isfinite(v))
        *at += (size_t)snprintf(buf + *at, cap - *at, ", \"%s\": null", key);
    else {
        *at += (size_t)snprintf(buf + *at, cap - *at, ", \"%s\": ", key);
        if (*at < cap)
            *at += (size_t)snprintf(buf + *at, cap - *at, fmt, v);
    }
}

// One record as a JSON line (no NaN or infinity in JSON: null).
static size_t record_line(const RunRecord *r, char *buf, size_t cap) {
    size_t at = (size_t)snprintf(buf, cap, "{\"step\": %lld", (long long)r->step);
    put_num(buf, cap, &at, "loss", r->loss, "%.9g");
    put_num(buf, cap, &at, "eval_loss", r->eval_loss, "%.9g");
    put_num(buf, cap, &at, "eval_ppl", isfinite(r->eval_loss) ? exp(r->eval_loss) : NAN, "%.9g");
    put_num(buf, cap, &at, "grad_norm", r->grad_norm, "%.9g");
    put_num(buf, cap, &at, "lr", r->lr, "%.9g");
    put_num(buf, cap, &at, "tokens_per_s", r->tokens_per_s, "%.1f");
    put_num(buf, cap, &at, "loss_scale", r->loss_scale > 0 ? r->loss_scale : NAN, "%.9g");
    if (at < cap)
        at += (size_t)snprintf(buf + at, cap - at, ", \"skipped\": %s, \"skipped_total\": %lld, \"tokens\": %lld",
                               r->skipped ? "true" : "false", (long long)r->skipped_total, (long long)r->tokens);
    put_num(buf, cap, &at, "elapsed_s", r->elapsed_s, "%.3f");
    if (r->pref) {   // (TRL's names)
        put_num(buf, cap, &at, "rewards/chosen", r->rewards[0], "%.9g");
        put_num(buf, cap, &at, "rewards/rejected", r->rewards[1], "%.9g");
        put_num(buf, cap, &at, "rewards/margins", r->rewards[0] - r->rewards[1], "%.9g");
        put_num(buf, cap, &at, "rewards/accuracies", r->rewards[2], "%.9g");
    }
    if (at < cap)
        at += (size_t)snprintf(buf + at, cap - at, "}\n");
    return at < cap ? at : cap;
}

static double num_of(json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

static int push(RunReport *r, const RunRecord *x) {
    if (r->n == r->cap) {
        int cap = r->cap ? 2 * r->cap : 256;
        RunRecord *p = realloc(r->rec, sizeof *p * (size_t)cap);
        if (!p)
            return -1;
        r->rec = p, r->cap = cap;
    }
    r->rec[r->n++] = *x;
    return 0;
}

// A resumed run: the records of steps up to `done` that run.jsonl holds (a line that is
// not a record is dropped), then the file rewritten with exactly those.
static int keep_until(RunReport *r, int64_t done, char *err, size_t errlen) {
    size_t bytes;
    char *text = rt_read_whole(r->jsonl, &bytes);
    if (!text)
        return 0;   // none yet: the report starts at the checkpoint
    for (char *line = text, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        json_t *o = json_loads(line, 0, NULL);
        json_t *st = o ? json_object_get(o, "step") : NULL;
        if (json_is_integer(st) && json_integer_value(st) >= 1 && json_integer_value(st) <= done &&
            (r->n == 0 || json_integer_value(st) > r->rec[r->n - 1].step)) {
            json_t *sk = json_object_get(o, "skipped"), *tot = json_object_get(o, "skipped_total"),
                   *tok = json_object_get(o, "tokens");
            RunRecord x = {.step = json_integer_value(st), .loss = num_of(o, "loss"),
                           .eval_loss = num_of(o, "eval_loss"), .grad_norm = num_of(o, "grad_norm"),
                           .lr = num_of(o, "lr"), .tokens_per_s = num_of(o, "tokens_per_s"),
                           .loss_scale = num_of(o, "loss_scale"), .skipped = json_is_true(sk),
                           .skipped_total = json_is_integer(tot) ? json_integer_value(tot) : 0,
                           .tokens = json_is_integer(tok) ? json_integer_value(tok) : 0,
                           .elapsed_s = num_of(o, "elapsed_s"), .pref = json_object_get(o, "rewards/chosen") != NULL,
                           .rewards = {num_of(o, "rewards/chosen"), num_of(o, "rewards/rejected"),
                                       num_of(o, "rewards/accuracies")}};
            if (!isfinite(x.loss_scale))
                x.loss_scale = 0;
            if (push(r, &x) != 0) {
                json_decref(o);
                free(text);
                return rt_fail(err, errlen, "out of memory reading %s", r->jsonl);
            }
        }
        json_decref(o);
    }
    free(text);
    char tmp[4300];
    int fd = rt_tmp_create(r->jsonl, tmp, sizeof tmp);
    if (fd < 0)
        return rt_fail(err, errlen, "%s: cannot write: %s", r->jsonl, strerror(errno));
    int rc = 0;
    char line[1024];
    for (int i = 0; i < r->n && rc == 0; i++)
        rc = rt_write_full(fd, line, record_line(&r->rec[i], line, sizeof line));
    if (close(fd) != 0 || rc != 0 || rename(tmp, r->jsonl) != 0) {
        int e = errno;
        unlink(tmp);
        return rt_fail(err, errlen, "%s: cannot write: %s", r->jsonl, strerror(e));
    }
    return 0;
}

int rt_report_open(RunReport **out, const char *dir, const RunReportInfo *info, int64_t done, char *err,
                   size_t errlen) {
    RunReport *r = calloc(1, sizeof *r);
    if (!r)
        return rt_fail(err, errlen, "out of memory");
    r->fd = -1;
    snprintf(r->jsonl, sizeof r->jsonl, "%s/run.jsonl", dir);
    snprintf(r->html, sizeof r->html, "%s/run.html", dir);
    r->info = *info;
    r->info.model = dup_or_null(info->model), r->info.device = dup_or_null(info->device);
    r->info.plan_dir = dup_or_null(info->plan_dir), r->info.data = dup_or_null(info->data);
    r->info.eval_data = dup_or_null(info->eval_data), r->info.gpu = dup_or_null(info->gpu);
    int flags = O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC;
    if (done > 0 && keep_until(r, done, err, errlen) != 0) {
        rt_report_close(r);
        return -1;
    }
    if (done == 0)   // a new run: a new report
        flags |= O_TRUNC;
    r->fd = open(r->jsonl, flags, 0644);
    if (r->fd < 0) {
        rt_fail(err, errlen, "%s: cannot open: %s", r->jsonl, strerror(errno));
        rt_report_close(r);
        return -1;
    }
    *out = r;
    return 0;
}

int rt_report_step(RunReport *r, const RunRecord *x, char *err, size_t errlen) {
    char line[1024];
    size_t n = record_line(x, line, sizeof line);
    if (push(r, x) != 0)
        return rt_fail(err, errlen, "out of memory for the run report");
    if (rt_write_full(r->fd, line, n) != 0)
        return rt_fail(err, errlen, "%s: cannot write: %s", r->jsonl, strerror(errno));
    return 0;
}

// s as a JSON string's contents (quotes, backslashes and control characters escaped).
static void json_text(char *buf, size_t cap, const char *s) {
    size_t n = 0;
    for (; *s && n + 8 < cap; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            buf[n++] = '\\', buf[n++] = (char)c;
        else if (c < 0x20)
            n += (size_t)snprintf(buf + n, cap - n, "\\u%04x", c);
        else
            buf[n++] = (char)c;
    }
    buf[n] = '\0';
}

void rt_report_failed(RunReport *r, const char *why) {
    free(r->failed);
    r->failed = xstrdup(why);
    char text[4096], line[4200];
    json_text(text, sizeof text, why);
    int n = snprintf(line, sizeof line, "{\"error\": \"%s\"}\n", text);
    if (n > 0 && (size_t)n < sizeof line && rt_write_full(r->fd, line, (size_t)n) != 0) {
        // (nothing more to do: the error itself is on standard error)
    }
}

void rt_report_measured(RunReport *r, int64_t bytes, const char *what) {
    r->measured_bytes = bytes;
    snprintf(r->measured_what, sizeof r->measured_what, "%.*s", (int)sizeof r->measured_what - 1, what);
}

static void xml_text(FILE *f, const char *s) {
    for (; s && *s; s++) {
        if (*s == '<')
            fputs("&lt;", f);
        else if (*s == '>')
            fputs("&gt;", f);
        else if (*s == '&')
            fputs("&amp;", f);
        else if (*s == '"')
            fputs("&quot;", f);
        else
            fputc(*s, f);
    }
}

enum { CHART_W = 900, CHART_H = 180, CHART_L = 70, POINTS_MAX = 5000 };

// Which value of a record a chart draws.
typedef double (*Field)(const RunRecord *r);
static double f_loss(const RunRecord *r) { return r->skipped ? NAN : r->loss; }
static double f_eval(const RunRecord *r) { return r->eval_loss; }
static double f_tps(const RunRecord *r) { return r->tokens_per_s; }
static double f_lr(const RunRecord *r) { return r->lr; }
static double f_gnorm(const RunRecord *r) { return r->skipped ? NAN : r->grad_norm; }
static double f_scale(const RunRecord *r) { return r->loss_scale > 0 ? r->loss_scale : NAN; }

// A chart of `main` over the steps (a line, and a circle of class `cls` a step up to
// POINTS_MAX steps, its value in a title), with `second` (class cls2) as points over it.
static void chart(FILE *f, const RunReport *r, const char *title, Field main, const char *cls, Field second,
                  const char *cls2, const char *color) {
    double lo = INFINITY, hi = -INFINITY;
    int64_t first = r->n ? r->rec[0].step : 1, last = r->n ? r->rec[r->n - 1].step : 1;
    if (r->info.steps > last)
        last = r->info.steps;
    for (int i = 0; i < r->n; i++)
        for (int k = 0; k < 2; k++) {
            double v = k ? (second ? second(&r->rec[i]) : NAN) : main(&r->rec[i]);
            if (isfinite(v))
                lo = fmin(lo, v), hi = fmax(hi, v);
        }
    fprintf(f, "<h3>%s</h3>\n", title);
    if (!(lo <= hi)) {
        fprintf(f, "<p>(no values)</p>\n");
        return;
    }
    if (hi == lo)
        hi = lo + (lo ? fabs(lo) * 0.01 : 1);
    double xs = (double)CHART_W / (double)(last > first ? last - first : 1), ys = CHART_H / (hi - lo);
#define X(s) ((double)((s) - first) * xs)
#define Y(v) (CHART_H - ((v) - lo) * ys)
    fprintf(f, "<svg width=\"%d\" height=\"%d\" xmlns=\"http://www.w3.org/2000/svg\">\n"
               "<g transform=\"translate(%d,8)\">\n<rect class=\"frame\" width=\"%d\" height=\"%d\"/>\n",
            CHART_W + CHART_L + 20, CHART_H + 34, CHART_L, CHART_W, CHART_H);
    fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.2\" points=\"", color);
    for (int i = 0; i < r->n; i++) {
        double v = main(&r->rec[i]);
        if (isfinite(v))
            fprintf(f, "%.1f,%.1f ", X(r->rec[i].step), Y(v));
    }
    fprintf(f, "\"/>\n");
    if (r->n <= POINTS_MAX)
        for (int i = 0; i < r->n; i++) {
            double v = main(&r->rec[i]);
            if (isfinite(v))
                fprintf(f, "<circle class=\"%s\" data-step=\"%lld\" cx=\"%.1f\" cy=\"%.1f\" r=\"1.8\" "
                           "fill=\"%s\"><title>step %lld: %.6g</title></circle>\n",
                        cls, (long long)r->rec[i].step, X(r->rec[i].step), Y(v), color,
                        (long long)r->rec[i].step, v);
        }
    for (int i = 0; second && i < r->n; i++) {
        double v = second(&r->rec[i]);
        if (isfinite(v))
            fprintf(f, "<circle class=\"%s\" data-step=\"%lld\" cx=\"%.1f\" cy=\"%.1f\" r=\"4\" "
                       "fill=\"#d62728\"><title>step %lld, eval: %.6g</title></circle>\n",
                    cls2, (long long)r->rec[i].step, X(r->rec[i].step), Y(v), (long long)r->rec[i].step, v);
    }
    fprintf(f, "<text x=\"-6\" y=\"10\" text-anchor=\"end\">%.4g</text>"
               "<text x=\"-6\" y=\"%d\" text-anchor=\"end\">%.4g</text>"
               "<text x=\"0\" y=\"%d\">step %lld</text>"
               "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">%lld</text>\n</g></svg>\n",
            hi, CHART_H, lo, CHART_H + 18, (long long)first, CHART_W, CHART_H + 18, (long long)last);
#undef X
#undef Y
}

static void write_page(FILE *f, const RunReport *r) {
    const RunReportInfo *in = &r->info;
    char a[32], b[32], c[32], d[32];
    fprintf(f, "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">\n<title>ftc run: ");
    xml_text(f, in->model);
    fprintf(f, "</title>\n<style>\nbody{font:13px sans-serif;margin:16px;color:#222}\n"
               "rect.frame{fill:none;stroke:#ccc}\ntable{border-collapse:collapse}\n"
               "td,th{border:1px solid #ddd;padding:3px 8px;text-align:right}\n"
               "td:first-child,th:first-child{text-align:left}\n</style></head><body>\n<h2>");
    xml_text(f, in->model);
    fprintf(f, " on %s</h2>\n", in->device ? in->device : "?");
    if (r->failed) {
        fprintf(f, "<p style=\"color:#b00\"><b>The run ended with an error:</b> ");
        xml_text(f, r->failed);
        fprintf(f, "</p>\n");
    }
    fprintf(f, "<p>Plan <code>");
    xml_text(f, in->plan_dir);
    fprintf(f, "</code>, data <code>");
    xml_text(f, in->data);
    fprintf(f, "</code>");
    if (in->eval_data) {
        fprintf(f, ", eval data <code>");
        xml_text(f, in->eval_data);
        fprintf(f, "</code>");
    }
    const RunRecord *lastr = r->n ? &r->rec[r->n - 1] : NULL;
    fprintf(f, ". %lld of %lld steps recorded, %lld tokens a step", (long long)(lastr ? lastr->step : 0),
            (long long)in->steps, (long long)in->tokens_per_step);
    if (lastr && isfinite(lastr->loss))
        fprintf(f, "; loss %.4f at step %lld", lastr->loss, (long long)lastr->step);
    for (int i = r->n - 1; i >= 0; i--)
        if (isfinite(r->rec[i].eval_loss)) {
            fprintf(f, "; eval loss %.4f (perplexity %.4g) at step %lld", r->rec[i].eval_loss,
                    exp(r->rec[i].eval_loss), (long long)r->rec[i].step);
            break;
        }
    if (lastr && lastr->skipped_total)
        fprintf(f, "; %lld steps skipped", (long long)lastr->skipped_total);
    fprintf(f, ".</p>\n");
    fprintf(f, "<h3>Memory: planned and measured</h3>\n<table>\n<tr><th></th><th>bytes</th><th></th></tr>\n");
    fprintf(f, "<tr><td>device arena (planned)</td><td>%lld</td><td>%s</td></tr>\n", (long long)in->planned_device,
            fmt_bytes(a, sizeof a, in->planned_device));
    fprintf(f, "<tr><td>context reserve (planned)</td><td>%lld</td><td>%s</td></tr>\n", (long long)in->reserve,
            fmt_bytes(b, sizeof b, in->reserve));
    fprintf(f, "<tr><td>host arena (planned, pinned)</td><td>%lld</td><td>%s</td></tr>\n",
            (long long)in->planned_host, fmt_bytes(c, sizeof c, in->planned_host));
    fprintf(f, "<tr><td>arenas in all (planned)</td><td>%lld</td><td>%s</td></tr>\n",
            (long long)(in->planned_device + in->planned_host),
            fmt_bytes(d, sizeof d, in->planned_device + in->planned_host));
    fprintf(f, "<tr><td>budget (%s)</td><td>%lld</td><td>%s</td></tr>\n", in->gpu ? in->gpu : "its GPU",
            (long long)in->budget, fmt_bytes(d, sizeof d, in->budget));
    if (r->measured_bytes > 0) {
        fprintf(f, "<tr><td>measured: ");
        xml_text(f, r->measured_what);
        fprintf(f, "</td><td>%lld</td><td>%s</td></tr>\n", (long long)r->measured_bytes,
                fmt_bytes(a, sizeof a, r->measured_bytes));
    }
    fprintf(f, "</table>\n");
    chart(f, r, "Loss (training, a point a step; eval in red)", f_loss, "pt", f_eval, "ev", "#1f77b4");
    chart(f, r, "Throughput (tokens/s)", f_tps, "tp", NULL, NULL, "#2ca02c");
    chart(f, r, "Learning rate", f_lr, "lr", NULL, NULL, "#9467bd");
    chart(f, r, "Gradient norm (before clipping)", f_gnorm, "gn", NULL, NULL, "#8c564b");
    bool scaled = false;
    for (int i = 0; i < r->n; i++)
        scaled |= r->rec[i].loss_scale > 0;
    if (scaled)
        chart(f, r, "Loss scale", f_scale, "ls", NULL, NULL, "#ff7f0e");
    fprintf(f, "</body></html>\n");
}

int rt_report_html(RunReport *r, char *err, size_t errlen) {
    char tmp[4300];
    int fd = rt_tmp_create(r->html, tmp, sizeof tmp);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) {
        int e = errno;
        if (fd >= 0)
            close(fd), unlink(tmp);
        return rt_fail(err, errlen, "%s: cannot write: %s", r->html, strerror(e));
    }
    write_page(f, r);
    bool ok = fflush(f) == 0 && !ferror(f);
    ok = fclose(f) == 0 && ok;
    if (!ok || rename(tmp, r->html) != 0) {
        int e = errno;
        unlink(tmp);
        return rt_fail(err, errlen, "%s: cannot write: %s", r->html, strerror(e));
    }
    return 0;
}

void rt_report_close(RunReport *r) {
    if (!r)
        return;
    if (r->fd >= 0)
        close(r->fd);
    free((char *)r->info.model), free((char *)r->info.device), free((char *)r->info.plan_dir);
    free((char *)r->info.data), free((char *)r->info.eval_data), free((char *)r->info.gpu);
    free(r->rec);
    free(r->failed);
    free(r);
}

//
// The report as a listener of a training session (session.h).
//

// Opens the report in the session's directory before step one (a resumed run's records
// kept up to its checkpoint), and says where it goes.
static int report_open(RunReport **r, const TrainSession *s, char *err, size_t errlen) {
    const Plan *p = s->p;
    RunReportInfo ri = {.model = p->model, .device = s->be->name, .plan_dir = s->o->plan_dir, .data = s->o->data,
                        .eval_data = s->o->eval_data, .gpu = p->gpu, .steps = s->steps,
                        .tokens_per_step = s->tokens_per_step, .planned_device = p->arena_bytes[ARENA_DEVICE],
                        .planned_host = p->arena_bytes[ARENA_HOST], .reserve = p->reserve_bytes,
                        .budget = p->budget_bytes};
    if (rt_report_open(r, s->report_dir, &ri, s->done, err, errlen) != 0)
        return -1;
    fprintf(s->out, "report: %s/run.jsonl (a record a step) and %s/run.html\n", s->report_dir, s->report_dir);
    return 0;
}

// The step's record; run.html again after an evaluation and every --save-every steps.
static int report_step(RunReport *r, const TrainSession *s, char *err, size_t errlen) {
    const StepResult *x = &s->last;
    const RunOptions *o = s->o;
    RunRecord rr = {.step = x->step, .loss = x->loss, .eval_loss = x->eval_loss,
                    .grad_norm = x->skipped ? NAN : x->grad_norm, .lr = x->lr,
                    .tokens_per_s = (double)s->tokens_per_step / x->step_s,
                    .loss_scale = x->scaled ? x->scale : 0, .elapsed_s = x->elapsed_s, .skipped = x->skipped,
                    .skipped_total = s->x.skipped, .tokens = s->tokens_per_step * x->step, .pref = x->pref,
                    .rewards = {x->pref_stats[PREF_REWARD_CHOSEN], x->pref_stats[PREF_REWARD_REJECTED],
                                x->pref_stats[PREF_ACCURACY]}};
    bool page = !isnan(x->eval_loss) || (o->save_every > 0 && x->step % o->save_every == 0);
    if (rt_report_step(r, &rr, err, errlen) != 0 || (page && rt_report_html(r, err, errlen) != 0))
        return -1;
    return 0;
}

// The run's end: run.html; after an error, the errors that ended it too (best effort: the
// run is failing already).
static int report_end(RunReport **r, const TrainEvent *e, char *err, size_t errlen) {
    char ignored[1024];
    if (e->kind == EV_DONE && rt_report_html(*r, err, errlen) != 0)
        return -1;   // (EV_FAILED follows)
    if (e->kind == EV_FAILED) {
        rt_report_failed(*r, e->why);
        rt_report_html(*r, ignored, sizeof ignored);
    }
    rt_report_close(*r);
    *r = NULL;
    return 0;
}

int rt_report_on_event(void *ctx, const TrainEvent *e, char *err, size_t errlen) {
    RunReport **r = ctx;
    const TrainSession *s = e->s;
    if (e->kind == EV_OPEN && s->report_dir)
        return report_open(r, s, err, errlen);
    if (!*r)
        return 0;
    if (e->kind == EV_MEASURED)
        rt_report_measured(*r, s->mem.used, s->mem.what);
    if (e->kind == EV_STEP_END)
        return report_step(*r, s, err, errlen);
    if (e->kind == EV_DONE || e->kind == EV_FAILED)
        return report_end(r, e, err, errlen);
    return 0;
}
