/* checkpoint.c — a port's dump judged teacher-forced against any checkpoint
 * directory, a layer slice at a time, in worker processes.
 *
 * Spec: M3-DUMP-12 (teacher forcing on a checkpoint: no case needed, the
 * golden of layer i is the reference layer run on the dump's own
 * layers.{i}.input with the checkpoint's mmap'd weights, the head on its
 * layers.{L-1}.output; slices, jobs, the slice result's case identity),
 * M3-DUMP-10 (row subsets: logits are computed at the dump's logits rows
 * only), M3-TOL-8 item 4 (teacher-forced layers are independent).
 *
 * Design: the dump is read once, only the tensors the slice needs
 * (cf_tset_load_select; the file is mapped, the rest is never read). Work
 * items are the slice's layers, then the head; item j goes to worker
 * j % jobs, so dense and MoE layers spread evenly. Workers are fork()ed
 * children, each single-threaded like the reference; each writes its
 * records as a slice result file (slice.c) that the parent reads back, the
 * same format `m3-conform merge` combines across machines. Only routed
 * experts are read: ref/moe.c runs m3_mlp on exp_*[idx[t]] for the k chosen
 * ids alone, so an expert no row routes to is never paged in.
 */
#include "conform.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fileio.h"

/* The tensors of the dump the slice [from, to] (+ head) needs. */
typedef struct want_set {
    int from, to, L, head;
} want_set;

static int keep_name(const char *name, void *arg)
{
    const want_set *w = arg;
    if (strcmp(name, "rows") == 0)
        return 1;
    if (strncmp(name, "layers.", 7) == 0) {
        char *end;
        long i = strtol(name + 7, &end, 10);
        if (end == name + 7 || *end != '.')
            return 0;
        if (i >= w->from && i <= w->to)
            return 1;
        return w->head && i == w->L - 1 && strncmp(end, ".output", 7) == 0;
    }
    if (w->head)
        return strcmp(name, "final_norm") == 0 || strcmp(name, "logits") == 0 ||
               strcmp(name, "final_norm.rows") == 0 || strcmp(name, "logits.rows") == 0;
    return 0;
}

int cf_tf_identity(const char *config_path, const char *dump, const char *mode, long T, char hex[65], m3_err *e)
{
    char *cfg = NULL, *hdr = NULL;
    size_t ncfg = 0, nhdr = 0;
    if (m3_read_file(config_path, 16u << 20, &cfg, &ncfg, e))
        return -1;
    if (cf_st_header(dump, &hdr, &nhdr, e)) {
        free(cfg);
        return -1;
    }
    char tbuf[32];
    snprintf(tbuf, sizeof tbuf, "%ld", T);
    const void *parts[5] = {"m3-case-identity-1", cfg, hdr, mode, tbuf};
    const size_t lens[5] = {18, ncfg, nhdr, strlen(mode), strlen(tbuf)};
    cf_sha256_parts(parts, lens, 5, hex);
    free(cfg);
    free(hdr);
    return 0;
}

/* Judge work items it[k] for k = w, w + jobs, ... into r (records appended);
 * the layers' rows are reported to pg (may be NULL) as one task. */
static int judge_items(const cf_tf_opts *o, const cf_case *cs, const cf_tset *dump, long T, const int *items,
                       int nitems, int w, int jobs, cf_report *r, m3_progress *pg, m3_err *e)
{
    const m3_model *m = o->model;
    int L = m->cfg.text.num_layers;
    if (pg) {
        int mine = 0;
        for (int k = w; k < nitems; k += jobs)
            mine += items[k] < L;
        char label[64];
        if (jobs > 1)
            snprintf(label, sizeof label, "worker %d/%d: teacher-forced layers", w + 1, jobs);
        else
            snprintf(label, sizeof label, "teacher-forced layers");
        m3_progress_task(pg, label, M3_UNIT_ROWS, (int64_t)mine * T);
    }
    /* each layer's golden is computed here, and its tie evidence with it (M3-VEC-11) */
    cf_judge_ctx jc = {.c = cs, .profile = o->profile, .model = m, .unsupported = o->unsupported,
                       .teacher_forced = 1, .want_T = T, .evidence_from = "computed with the teacher-forced golden"};
    for (int k = w; k < nitems; k += jobs) {
        int i = items[k];
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        cf_tset g = {0}, ev = {0};
        cf_report part;
        memset(&part, 0, sizeof part);
        part.first_fail = part.first_diverged = part.first_tie = -1;
        char nm[64];
        int rc;
        if (i < L) {
            snprintf(nm, sizeof nm, "layers.%d.input", i);
            const cf_tensor *x = cf_tset_get(dump, nm);
            rc = cf_ref_layer_progress(m, o->mode, i, x->f, (int)T, &g, pg, e);
            if (rc)
                m3_fail_prefix(e, "teacher-forced layer %d", i);
        } else {
            snprintf(nm, sizeof nm, "layers.%d.output", L - 1);
            const cf_tensor *x = cf_tset_get(dump, nm), *lg = cf_tset_get(dump, "logits");
            const cf_tensor *lr = cf_rows_of(dump, "logits");
            int sub = lg && cf_tensor_subset(lg, lr, T);
            rc = cf_ref_head_rows(m, o->mode, x->f, (int)T, sub ? lr->i : NULL, sub ? (int)lr->n : 0, &g, e);
        }
        int routed = -1; /* distinct experts the golden routes to: the experts whose weights were read */
        if (!rc && i < L && m->cfg.text.layer_moe[i]) {
            snprintf(nm, sizeof nm, "layers.%d.moe.topk_index", i);
            const cf_tensor *ti = cf_tset_get(&g, nm);
            int E = m->cfg.text.num_experts;
            unsigned char *seen = ti && ti->is_int ? calloc((size_t)E, 1) : NULL;
            if (seen) {
                routed = 0;
                for (size_t q = 0; q < ti->n; q++)
                    if (ti->i[q] >= 0 && ti->i[q] < E && !seen[ti->i[q]]++)
                        routed++;
                free(seen);
            }
        }
        if (!rc)
            rc = cf_evidence_model(m, o->mode, &g, &ev, e);
        jc.evidence = &ev;
        if (!rc)
            rc = cf_judge(&part, &jc, dump, &g, e);
        cf_tset_free(&g);
        cf_tset_free(&ev);
        for (int q = 0; !rc && q < part.nrec; q++) {
            cf_record *x = cf_report_add(r);
            if (!x)
                rc = m3_fail(e, "out of memory");
            else
                *x = part.rec[q];
        }
        if (part.rows_judged > r->rows_judged)
            r->rows_judged = part.rows_judged;
        cf_report_free(&part);
        if (rc)
            return -1;
        clock_gettime(CLOCK_MONOTONIC, &t1);
        if (o->timing) {
            if (pg)
                m3_progress_clear(pg);
            double dt = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
            char moe[64] = "";
            if (routed >= 0)
                snprintf(moe, sizeof moe, "; %d of %d experts routed to", routed, m->cfg.text.num_experts);
            if (i < L)
                fprintf(stderr, "m3-conform: worker %d: layer %d (%s, %s) judged in %.2f s%s\n", w, i,
                        m->cfg.text.layer_sparse[i] ? "MSA" : "dense attention",
                        m->cfg.text.layer_moe[i] ? "MoE" : "dense MLP", dt, moe);
            else
                fprintf(stderr, "m3-conform: worker %d: head judged in %.2f s\n", w, dt);
        }
    }
    return 0;
}

int cf_tf_check(const cf_tf_opts *o, cf_report *r, cf_slice *sl, m3_err *e)
{
    const m3_model *m = o->model;
    int L = m->cfg.text.num_layers, H = m->cfg.text.hidden_size;
    int from = o->from < 0 ? 0 : o->from, to = o->to < 0 ? L - 1 : o->to;
    if (from > to || to >= L)
        return m3_fail(e, "--layers %d-%d: the model has %d layers (0..%d)", from, to, L, L - 1);
    int jobs = o->jobs < 1 ? 1 : o->jobs;
    want_set ws = {from, to, L, to == L - 1};
    cf_tset dump = {0};
    char meta[512];
    int rc = -1, nitems = 0;
    int *items = malloc((size_t)(L + 1) * sizeof *items);
    char (*tmp)[1100] = calloc((size_t)jobs, sizeof *tmp);
    pid_t *pid = calloc((size_t)jobs, sizeof *pid);
    if (!items || !tmp || !pid) {
        m3_fail(e, "out of memory");
        goto out;
    }
    if (cf_tset_load_select(&dump, o->dump, keep_name, &ws, e) ||
        cf_st_meta(o->dump, "m3.unsupported", meta, sizeof meta, e))
        goto out;
    /* T: the rows of every layer input of the slice, all positions (M3-DUMP-10) */
    long T = -1;
    for (int i = from; i <= to + ws.head && i < L; i++) {
        char nm[64];
        snprintf(nm, sizeof nm, "layers.%d.input", i);
        const cf_tensor *x = cf_tset_get(&dump, nm);
        if (i > to) { /* the head reads the last layer's output */
            snprintf(nm, sizeof nm, "layers.%d.output", L - 1);
            x = cf_tset_get(&dump, nm);
        }
        if (!x || x->is_int || x->ndim != 2 || x->shape[1] != H || (T >= 0 && x->shape[0] != T)) {
            m3_fail(e, "%s: teacher forcing needs \"%s\" as a float [T, %d] tensor%s", o->dump, nm, H,
                    T >= 0 ? " with the T rows of the other layer inputs" : "");
            goto out;
        }
        T = (long)x->shape[0];
        const cf_tensor *rs = cf_rows_of(&dump, nm);
        int prefix = rs && (long)rs->n == T;
        for (size_t q = 0; prefix && q < rs->n; q++)
            prefix = rs->i[q] == (int32_t)q;
        if (rs && (long)rs->n == T && !prefix) {
            m3_fail(e, "%s: teacher forcing needs every position of \"%s\"; its rows are the subset \"%s\" "
                       "(M3-DUMP-10)", o->dump, nm, rs->name);
            goto out;
        }
    }
    if (to == L - 1) {
        char nm[64];
        snprintf(nm, sizeof nm, "layers.%d.output", L - 1);
        const cf_tensor *x = cf_tset_get(&dump, nm);
        if (!x || x->is_int || x->ndim != 2 || x->shape[0] != T || x->shape[1] != H) {
            m3_fail(e, "%s: the head is judged from \"%s\", a float [%ld, %d] tensor", o->dump, nm, T, H);
            goto out;
        }
    }
    if (cf_rows_validate(&dump, o->dump, T, e))
        goto out;
    char unsupported[1100];
    snprintf(unsupported, sizeof unsupported, "%s%s%s", o->unsupported ? o->unsupported : "",
             o->unsupported && o->unsupported[0] && meta[0] ? "," : "", meta);
    cf_tf_opts oo = *o;
    oo.unsupported = unsupported;
    for (int i = from; i <= to; i++)
        items[nitems++] = i;
    if (to == L - 1)
        items[nitems++] = L; /* the head */
    if (jobs > nitems)
        jobs = nitems;
    memset(r, 0, sizeof *r);
    r->first_fail = r->first_diverged = r->first_tie = -1;
    snprintf(r->id, sizeof r->id, "%.280s#teacher-forced", o->c->id);
    snprintf(r->component, sizeof r->component, "model");
    snprintf(r->profile, sizeof r->profile, "%s", o->profile->name);
    snprintf(r->target, sizeof r->target, "dump");
    r->teacher_forced = 1;
    snprintf(r->evidence, sizeof r->evidence, "computed with the teacher-forced golden");
    r->rows_total = T;
    memset(sl, 0, sizeof *sl);
    snprintf(sl->case_id, sizeof sl->case_id, "%s", o->c->id);
    snprintf(sl->profile, sizeof sl->profile, "%s", o->profile->name);
    snprintf(sl->mode, sizeof sl->mode, "%s", o->mode == M3_MODE_BF16 ? "bf16" : "fp32");
    snprintf(sl->kit, sizeof sl->kit, "%s", CF_KIT_VERSION);
    sl->from = from;
    sl->to = to;
    sl->L = L;
    sl->head = to == L - 1;
    if (cf_tf_identity(o->config_path, o->dump, sl->mode, T, sl->identity, e))
        goto out;
    if (jobs == 1) {
        const int jr = judge_items(&oo, o->c, &dump, T, items, nitems, 0, 1, r, o->pg, e);
        if (o->pg)
            m3_progress_end(o->pg);
        if (jr)
            goto out;
    } else {
        if (o->pg)
            m3_progress_clear(o->pg);
        const char *td = getenv("TMPDIR");
        fflush(NULL);
        for (int w = 0; w < jobs; w++) {
            snprintf(tmp[w], sizeof tmp[w], "%s/m3-conform-job-XXXXXX", td && *td ? td : "/tmp");
            int fd = mkstemp(tmp[w]);
            if (fd < 0) {
                m3_fail(e, "cannot create a temporary file in %s", td && *td ? td : "/tmp");
                tmp[w][0] = 0;
                goto reap;
            }
            close(fd);
            pid[w] = fork();
            if (pid[w] < 0) {
                m3_fail(e, "fork: %s", strerror(errno));
                goto reap;
            }
            if (pid[w] == 0) { /* worker: its items, written as a slice result */
                cf_report part;
                memset(&part, 0, sizeof part);
                part.teacher_forced = 1;
                part.rows_total = T;
                /* workers share the terminal: plain lines of their own, every 10 s on a
                 * terminal, at the parent's interval in a log */
                m3_progress wpg, *wp = NULL;
                if (o->pg && o->pg->style != M3_PROGRESS_QUIET) {
                    m3_progress_init(&wpg, o->pg->out, M3_PROGRESS_PLAIN, o->pg->prog, NULL, NULL);
                    wpg.plain_interval_s = o->pg->style == M3_PROGRESS_TTY ? 10.0 : o->pg->plain_interval_s;
                    wp = &wpg;
                }
                int bad = judge_items(&oo, o->c, &dump, T, items, nitems, w, jobs, &part, wp, e) ||
                          cf_slice_write(tmp[w], sl, &part, e);
                if (bad)
                    fprintf(stderr, "m3-conform: worker %d: %s\n", w, e->msg);
                fflush(NULL);
                _exit(bad ? 2 : 0);
            }
        }
    reap:;
        int failed = e->msg[0] != 0;
        for (int w = 0; w < jobs; w++) {
            if (pid[w] <= 0)
                continue;
            int st = 0;
            while (waitpid(pid[w], &st, 0) < 0 && errno == EINTR)
                ;
            if (failed)
                continue;
            if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
                m3_fail(e, "worker %d of %d failed (%s %d)", w, jobs, WIFEXITED(st) ? "exit" : "signal",
                        WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
                failed = 1;
                continue;
            }
            cf_slice part;
            if (cf_slice_load(&part, tmp[w], o->tol, e)) {
                failed = 1;
                continue;
            }
            for (int q = 0; q < part.rep.nrec && !failed; q++) {
                cf_record *x = cf_report_add(r);
                if (!x) {
                    m3_fail(e, "out of memory");
                    failed = 1;
                } else {
                    *x = part.rep.rec[q];
                }
            }
            if (part.rep.rows_judged > r->rows_judged)
                r->rows_judged = part.rep.rows_judged;
            cf_slice_free(&part);
        }
        for (int w = 0; w < jobs; w++)
            if (tmp[w][0])
                unlink(tmp[w]);
        if (failed)
            goto out;
    }
    if (!r->rows_judged)
        r->rows_judged = T;
    cf_localise(r);
    rc = 0;
out:
    if (rc)
        cf_report_free(r);
    cf_tset_free(&dump);
    free(items);
    free(tmp);
    free(pid);
    return rc;
}
