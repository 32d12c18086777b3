/* main.c — bin/m3-conform, the conformance kit's command line.
 *
 *   m3-conform check --case DIR --dump FILE [--profile fp32|bf16] [--json OUT]
 *                    [--junit OUT] [--plot OUT.png] [--teacher-forced]
 *                    [--tie-dump FILE | --no-settle]
 *   m3-conform run [DIR|MANIFEST...] [--profile P] [--target ref] [--json OUT]
 *                  [--junit OUT] [--plot OUT.png] [--teacher-forced]
 *   m3-conform chat-check --model DIR --conversation FILE --ids FILE|LIST
 *                  [--thinking MODE] [--print-expected]
 *   m3-conform plot --dump FILE --out DIR [--title TEXT]
 *
 * plot draws a dump's MSA block selections and MoE routing (dump_plot.h) to
 * DIR/msa_selection.png and DIR/moe_routing.png; exit 0, or 2 on bad input.
 *
 * check exits 0 when the dump conforms, 1 when it does not, 2 for usage
 * errors and bad input (unreadable case, dump, tolerances) or an internal
 * error, 3 when it is inconclusive: TieDiverged, everything conforms except
 * rows that a tie-accepted choice reaches (M3-TOL-8), but only with
 * --no-settle: by default check settles a TieDiverged dump in the same call by
 * judging it teacher-forced (or --tie-dump FILE, the implementation's own
 * teacher-forced dump of the case) and exits 0 or 1 on that. run exits 0 when every
 * case conforms and every mutant behaves as its mutant.json says, else 1
 * (2 for usage errors). chat-check exits 0 when the port's prompt ids equal
 * the spec's rendering of the conversation tokenized with DIR's tokenizer
 * (M3-CHAT-*, chat_check.h), 1 when they differ (the first difference is
 * printed), 2 for usage errors and bad input. Spec: M3-VEC-*, M3-DUMP-*,
 * M3-TOL-*; the pass rule is written in docs/validating-a-port.md.
 */
#include "chat_check.h"
#include "conform.h"
#include "dump_plot.h"
#include "fileio.h"
#include "golden.h"
#include "synth.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef struct opts {
    const char *cmd;
    const char *case_dir, *dump, *tie_dump, *profile, *json, *junit, *plot, *tolerances, *target,
        *caps_file, *out, *title, *model_dir, *layers, *jobs_s, *result, *mode;
    char unsupported[1024];
    int teacher_forced, verbose, quiet, no_hash, no_mutants, no_settle, help, logits, timing;
    const char *paths[256];
    int npaths;
} opts;

static void usage(FILE *f)
{
    fprintf(f,
            "usage:\n"
            "  m3-conform check --case DIR --dump FILE [--profile fp32|bf16] [--json OUT]\n"
            "                   [--junit OUT] [--plot OUT.png] [--teacher-forced]\n"
            "                   [--declare-unsupported CAP,...] [--capabilities FILE]\n"
            "                   [--tolerances FILE] [--tie-dump FILE | --no-settle] [--no-hash]\n"
            "                   [--verbose] [--quiet]\n"
            "  m3-conform run [DIR|MANIFEST...] [--profile fp32|bf16] [--target ref]\n"
            "                 [--json OUT] [--junit OUT] [--plot OUT.png] [--teacher-forced]\n"
            "                 [--no-mutants] [--tolerances FILE] [--no-hash] [--verbose] [--quiet]\n"
            "  m3-conform check --teacher-forced --model DIR --dump FILE [--layers A-B] [--jobs N]\n"
            "                   [--result SLICE.json] [--mode fp32|bf16] [--profile P] [--json OUT] [--junit OUT]\n"
            "                   [--timing]   (each layer's time on stderr)\n"
            "                 a checkpoint directory, no case needed: each layer's golden from the dump's own\n"
            "                 layers.{i}.input, N worker processes; --layers checks a slice (M3-DUMP-12)\n"
            "  m3-conform merge SLICE.json... [--json OUT] [--junit OUT]   slices into one verdict\n"
            "  m3-conform rows --case DIR [--logits]   the positions the case wants in a dump\n"
            "                 (params.rows / params.logits_rows, M3-DUMP-11), comma-separated\n"
            "  m3-conform synth --layers N --seed S --out DIR [options]   (synth --help)\n"
            "  m3-conform golden --case DIR [--out FILE] [--evidence FILE]   (write a model case's golden with the\n"
            "                    reference; default FILE: DIR/expected.safetensors)\n"
            "  m3-conform chat-check --model DIR --conversation FILE --ids FILE|LIST\n"
            "                 [--thinking adaptive|enabled|disabled] [--print-expected]\n"
            "  m3-conform plot --dump FILE --out DIR [--title TEXT]\n"
            "                 (writes DIR/msa_selection.png and DIR/moe_routing.png)\n"
            "  m3-conform version\n"
            "check: exit 0 = the dump conforms, 1 = it does not, 2 = usage / bad input,\n"
            "       3 = inconclusive (TieDiverged, only with --no-settle: only rows an\n"
            "           accepted tie reaches differ). Without --no-settle check settles such a\n"
            "           dump itself: it judges it (or --tie-dump FILE, the port's own\n"
            "           teacher-forced dump) teacher-forced, and exits 0 or 1 on that.\n"
            "chat-check: exit 0 = the ids are the spec's prompt for FILE, 1 = they differ\n"
            "       (first difference printed), 2 = usage / bad input.\n"
            "Capabilities a port may declare absent: block_indices router eagle3 greedy vision\n"
            "internals (every per-layer tensor but layers.{i}.input/output: a residual-only dump).\n"
            "Run 'm3-conform check --help' or 'm3-conform run --help' for the options.\n"
            "Docs: docs/validating-a-port.md\n");
}

/* The options of check or run, described (`m3-conform check --help`). */
static void usage_cmd(FILE *f, const char *cmd)
{
    const int check = strcmp(cmd, "check") == 0;
    if (check)
        fprintf(f, "usage: m3-conform check --case DIR --dump FILE [options]\n\n"
                   "Judge one port's activation dump (M3-DUMP-*) of the case in DIR against its golden\n"
                   "outputs (DIR/expected.safetensors, or the reference's own run when there is none).\n"
                   "Exit: 0 conforms, 1 does not, 2 bad input or internal error (a JUnit / JSON record\n"
                   "names it), 3 inconclusive (TieDiverged, only with --no-settle).\n\n"
                   "  --case DIR              the vector case directory (case.json and its files)\n"
                   "  --dump FILE             the port's dump: one .safetensors file\n"
                   "  --teacher-forced        judge every layer from the dump's own layer input\n"
                   "  --tie-dump FILE         the port's teacher-forced dump, used to settle TieDiverged\n"
                   "  --no-settle             report TieDiverged (exit 3) instead of settling it\n"
                   "  --declare-unsupported CAP,...  capabilities the port lacks: their tensors are\n"
                   "                          NotSupported, not Fail (block_indices router eagle3 greedy\n"
                   "                          vision; vision makes a whole vision case NotSupported)\n"
                   "  --capabilities FILE     the same from JSON: {\"unsupported\": [..]} or\n"
                   "                          {\"capabilities\": {name: true|false}}\n");
    else
        fprintf(f, "usage: m3-conform run [DIR|MANIFEST...] [options]\n\n"
                   "Run the reference on every case of the manifests (default vectors/manifest.json) or\n"
                   "on the case directories given, judge it, and check every mutant is caught.\n"
                   "Exit: 0 all conform and every mutant behaves as declared, 1 otherwise, 2 bad input.\n\n"
                   "  --target ref            the implementation run (only ref in this build)\n"
                   "  --teacher-forced        also judge every model case layer by layer\n"
                   "  --no-mutants            skip the mutants\n"
                   "  --quiet, -q             print failures and the summary only\n");
    fprintf(f, "  --profile fp32|bf16     tolerance profile (default: the case's)\n"
               "  --tolerances FILE       tolerance file (default spec/tolerances.json)\n"
               "  --json OUT              JSON lines: one object per tensor and one per case; the\n"
               "                          file is replaced, not appended to: give each run its own\n"
               "  --junit OUT             JUnit XML, one <testcase> per case\n"
               "  --plot OUT.png          heat map of log10 NMSE per layer and tensor\n"
               "                          (outputs are written whole and renamed into place; none may\n"
               "                          be an input or another output)\n"
               "  --no-hash               skip the sha256 checks of case.json \"files\"\n"
               "  --verbose, -v           every tensor, not only the non-passing ones\n"
               "  --help, -h              this text\n"
               "Docs: docs/validating-a-port.md\n");
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int exists(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0;
}

static int is_dir(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static void append_caps(char *dst, size_t cap, const char *add)
{
    if (!add || !*add)
        return;
    size_t n = strlen(dst);
    snprintf(dst + n, cap - n, "%s%s", n ? "," : "", add);
}

/* Default tolerance file, the first that exists: ./spec/tolerances.json, then
 * relative to the binary's directory ../spec/tolerances.json (a build tree)
 * and ../share/m3/tolerances.json (an installed tree: make install puts it
 * there for any PREFIX, and the tree may be moved). */
static void default_tolerances(char *out, size_t cap)
{
    snprintf(out, cap, "spec/tolerances.json");
    if (exists(out))
        return;
    char exe[2048];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        char *s = strrchr(exe, '/');
        if (s) {
            *s = 0;
            snprintf(out, cap, "%s/../spec/tolerances.json", exe);
            if (exists(out))
                return;
            snprintf(out, cap, "%s/../share/m3/tolerances.json", exe);
            if (exists(out))
                return;
        }
    }
    snprintf(out, cap, "spec/tolerances.json");
}

/* Every name of the comma/space separated list must be a known capability. */
static int check_cap_names(const char *list, const char *origin, m3_err *e)
{
    static const char *const caps[] = {"block_indices", "router", "eagle3", "greedy", "vision", "internals", NULL};
    for (const char *p = list; *p;) {
        while (*p == ',' || *p == ' ')
            p++;
        const char *q = p;
        while (*q && *q != ',' && *q != ' ')
            q++;
        if (q == p)
            break;
        int ok = 0;
        for (int k = 0; caps[k]; k++)
            ok |= strlen(caps[k]) == (size_t)(q - p) && strncmp(caps[k], p, (size_t)(q - p)) == 0;
        if (!ok)
            return m3_fail(e, "%s: unknown capability \"%.*s\" (known: block_indices router eagle3 "
                              "greedy vision internals)",
                           origin, (int)(q - p), p);
        p = q;
    }
    return 0;
}

static int load_caps_file(const char *path, char *dst, size_t cap, m3_err *e)
{
    char *buf;
    size_t n;
    if (m3_read_file(path, 1u << 20, &buf, &n, e) != 0)
        return m3_fail_prefix(e, "capabilities file");
    cJSON *root = cJSON_ParseWithLength(buf, n);
    free(buf);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return m3_fail(e, "%s: must be a JSON object {\"unsupported\": [..]} or {\"capabilities\": {name: bool}}",
                       path);
    }
    int rc = 0;
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(root, "unsupported");
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(root, "capabilities");
    const cJSON *x;
    if (u) {
        if (!cJSON_IsArray(u))
            rc = m3_fail(e, "%s: \"unsupported\" must be an array of capability names", path);
        else
            cJSON_ArrayForEach(x, u)
            {
                if (!cJSON_IsString(x)) {
                    rc = m3_fail(e, "%s: \"unsupported\" entries must be strings", path);
                    break;
                }
                append_caps(dst, cap, x->valuestring);
            }
    }
    if (!rc && c) {
        if (!cJSON_IsObject(c))
            rc = m3_fail(e, "%s: \"capabilities\" must be an object {name: true|false}", path);
        else
            cJSON_ArrayForEach(x, c) if (cJSON_IsFalse(x)) append_caps(dst, cap, x->string);
    }
    if (!rc && !u && !c)
        rc = m3_fail(e, "%s: needs \"unsupported\" or \"capabilities\"", path);
    if (!rc && c) /* every name in the object, false or true, must be known */
        cJSON_ArrayForEach(x, c) if (!rc) rc = check_cap_names(x->string, path, e);
    if (!rc)
        rc = check_cap_names(dst, path, e);
    cJSON_Delete(root);
    return rc;
}

/* No output may be an input, and no two outputs the same file (device and
 * inode; for a path that does not exist yet, its directory and name). Inputs:
 * the dumps, the tolerance and capability files, every file of the case
 * directory or of the directories given to run, and the manifests. */
static int check_outputs(const opts *o, const char *tolp, m3_err *e)
{
    const char *outs[3] = {o->json, o->junit, o->plot};
    const char *flags[3] = {"--json", "--junit", "--plot"};
    for (int i = 0; i < 3; i++)
        for (int j = i + 1; j < 3; j++)
            if (outs[i] && outs[j] && m3_same_file(outs[i], outs[j]))
                return m3_fail(e, "%s and %s name the same file (%s); give each its own", flags[i],
                               flags[j], outs[i]);
    const char *single[5] = {o->dump, o->tie_dump, tolp, o->caps_file, NULL};
    const char *dirs[258];
    int nd = 0;
    if (o->case_dir)
        dirs[nd++] = o->case_dir;
    for (int k = 0; k < o->npaths; k++) {
        if (is_dir(o->paths[k]))
            dirs[nd++] = o->paths[k];
        else
            single[4] = o->paths[k]; /* a manifest (the last one given) */
    }
    for (int i = 0; i < 3; i++) {
        if (!outs[i])
            continue;
        for (int k = 0; k < 5; k++)
            if (single[k] && m3_same_file(outs[i], single[k]))
                return m3_fail(e, "%s %s is an input (%s); refusing to overwrite it", flags[i],
                               outs[i], single[k]);
        for (int k = 0; k < o->npaths; k++)
            if (m3_same_file(outs[i], o->paths[k]))
                return m3_fail(e, "%s %s is an input; refusing to overwrite it", flags[i], outs[i]);
        for (int d = 0; d < nd; d++) {
            DIR *dh = opendir(dirs[d]);
            struct dirent *de;
            while (dh && (de = readdir(dh))) {
                char p[4400];
                if (de->d_name[0] == '.')
                    continue;
                snprintf(p, sizeof p, "%s/%s", dirs[d], de->d_name);
                if (m3_same_file(outs[i], p)) {
                    closedir(dh);
                    return m3_fail(e, "%s %s is an input (%s); refusing to overwrite it", flags[i],
                                   outs[i], p);
                }
            }
            if (dh)
                closedir(dh);
        }
    }
    return 0;
}

static int parse_args(opts *o, int argc, char **argv)
{
    memset(o, 0, sizeof *o);
    if (argc < 2)
        return -1;
    o->cmd = argv[1];
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
#define VAL(flag, field)                                                                          \
    if (strcmp(a, flag) == 0) {                                                                   \
        if (i + 1 >= argc) {                                                                      \
            fprintf(stderr, "m3-conform: %s needs a value\n", flag);                              \
            return -1;                                                                            \
        }                                                                                         \
        o->field = argv[++i];                                                                     \
        continue;                                                                                 \
    }
        VAL("--case", case_dir)
        VAL("--dump", dump)
        VAL("--tie-dump", tie_dump)
        VAL("--profile", profile)
        VAL("--json", json)
        VAL("--junit", junit)
        VAL("--plot", plot)
        VAL("--tolerances", tolerances)
        VAL("--target", target)
        VAL("--capabilities", caps_file)
        VAL("--out", out)
        VAL("--title", title)
        VAL("--model", model_dir)
        VAL("--layers", layers)
        VAL("--jobs", jobs_s)
        VAL("--result", result)
        VAL("--mode", mode)
#undef VAL
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            o->help = 1;
        } else if (strcmp(a, "--declare-unsupported") == 0) {
            if (i + 1 >= argc) {
                fprintf(stderr, "m3-conform: --declare-unsupported needs a value\n");
                return -1;
            }
            append_caps(o->unsupported, sizeof o->unsupported, argv[++i]);
        } else if (strcmp(a, "--teacher-forced") == 0) {
            o->teacher_forced = 1;
        } else if (strcmp(a, "--timing") == 0) {
            o->timing = 1;
        } else if (strcmp(a, "--logits") == 0) {
            o->logits = 1;
        } else if (strcmp(a, "--no-settle") == 0) {
            o->no_settle = 1;
        } else if (strcmp(a, "--verbose") == 0 || strcmp(a, "-v") == 0) {
            o->verbose = 1;
        } else if (strcmp(a, "--quiet") == 0 || strcmp(a, "-q") == 0) {
            o->quiet = 1;
        } else if (strcmp(a, "--no-hash") == 0) {
            o->no_hash = 1;
        } else if (strcmp(a, "--no-mutants") == 0) {
            o->no_mutants = 1;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "m3-conform: unknown option %s\n", a);
            return -1;
        } else if (o->npaths < 256) {
            o->paths[o->npaths++] = a;
        } else {
            fprintf(stderr, "m3-conform: too many paths\n");
            return -1;
        }
    }
    if (o->profile && strcmp(o->profile, "fp32") && strcmp(o->profile, "bf16")) {
        /* other profile names are allowed if the tolerance file has them; checked later */
    }
    m3_err ce = {{0}};
    if (check_cap_names(o->unsupported, "--declare-unsupported", &ce)) {
        fprintf(stderr, "m3-conform: %s\n", ce.msg);
        return -1;
    }
    return 0;
}

/* ---- shared per-case machinery ---------------------------------------------------- */
typedef struct ctx {
    opts *o;
    cf_tolerances tol;
    FILE *jsonl;
    cf_report *reps; /* reports kept for the plot and JUnit */
    int nreps, cap;
    const char *suite;
    char suite_name[2400]; /* the last suite run, for the JUnit file */
    int color;
    char fatal[1024];      /* the problem behind exit 2 when no case report says it */
    m3_progress pg; /* stderr: case i/n, and the layer of the reference runs */
} ctx;

static cf_report *keep(ctx *c, const cf_report *r)
{
    if (c->nreps == c->cap) {
        int cap = c->cap ? 2 * c->cap : 32;
        cf_report *n = realloc(c->reps, (size_t)cap * sizeof *n);
        if (!n)
            return NULL;
        c->reps = n;
        c->cap = cap;
    }
    c->reps[c->nreps] = *r;
    return &c->reps[c->nreps++];
}

static void emit(ctx *c, cf_report *r, int print, int verbose)
{
    m3_progress_clear(&c->pg); /* reports start on a clean line */
    if (print)
        cf_print_report(stdout, r, verbose, c->color);
    if (c->jsonl) {
        cf_write_jsonl(c->jsonl, r, c->suite);
        fflush(c->jsonl);
    }
}

static const cf_profile *pick_profile(ctx *c, const cf_case *cs, const char *override, m3_err *e)
{
    const char *name = override ? override : cs->profile;
    const cf_profile *p = cf_tol_profile(&c->tol, name);
    if (!p)
        m3_fail(e, "%s: no tolerance profile \"%s\" (case %s)", c->tol.path, name, cs->id);
    return p;
}

static void init_report(cf_report *r, const cf_case *cs, const char *suffix, const char *profile,
                        const char *target)
{
    memset(r, 0, sizeof *r);
    r->first_fail = r->first_diverged = r->first_tie = -1;
    snprintf(r->id, sizeof r->id, "%s%s", cs ? cs->id : "?", suffix ? suffix : "");
    snprintf(r->component, sizeof r->component, "%s", cs ? cs->component : "?");
    snprintf(r->profile, sizeof r->profile, "%s", profile ? profile : "?");
    snprintf(r->target, sizeof r->target, "%s", target);
}

static void internal_error(cf_report *r, const m3_err *e)
{
    snprintf(r->error, sizeof r->error, "%s", e->msg);
    r->result = CF_INTERNAL_ERROR;
    r->first_fail = r->first_diverged = r->first_tie = -1;
}

/* The tie evidence beside a case's expected.safetensors (M3-VEC-11), when present,
 * into ev (verify: bound to the golden by its sha256); ev_from[cap] receives its path,
 * "" when the golden has none. */
static int evidence_of(const cf_case *cs, int verify, const cf_tset *golden, cf_tset *ev, char *ev_from,
                       size_t cap, m3_err *e)
{
    char p[2300], q[2300];
    snprintf(p, sizeof p, "%s/expected.safetensors", cs->dir);
    snprintf(q, sizeof q, "%s/%s", cs->dir, CF_EVIDENCE_FILE);
    ev_from[0] = 0;
    if (!exists(q))
        return 0;
    if (cf_evidence_load(ev, q, golden, p, verify, e))
        return -1;
    snprintf(ev_from, cap, "%.2000s", q);
    return 0;
}

/* Golden outputs of a case and their tie evidence (M3-VEC-11): expected.safetensors
 * (its evidence then read by evidence_of, after the golden's own checks; defer 0:
 * here), else both computed by the reference (reported to pg's current task).
 * ev_from[cap] receives where the evidence came from, "" when the golden has none. */
static int golden_of(const cf_case *cs, const m3_model *m, int verify, cf_tset *golden, int *computed, cf_tset *ev,
                     char *ev_from, size_t cap, int defer, m3_progress *pg, m3_err *e)
{
    char p[2300];
    snprintf(p, sizeof p, "%s/expected.safetensors", cs->dir);
    *computed = 0;
    ev_from[0] = 0;
    if (exists(p)) {
        if (cf_tset_load(golden, p, e))
            return -1;
        return defer ? 0 : evidence_of(cs, verify, golden, ev, ev_from, cap, e);
    }
    *computed = 1;
    snprintf(ev_from, cap, "computed with the golden by the reference");
    if (strcmp(cs->component, "model") != 0)
        return cf_ref_component(cs, golden, e) || cf_evidence_from_component(golden, ev, e) ? -1 : 0;
    cf_tset in = {0};
    snprintf(p, sizeof p, "%s/inputs.safetensors", cs->dir);
    int rc = cf_tset_load(&in, p, e);
    if (!rc)
        rc = cf_ref_model_ev(cs, m, &in, 0, golden, ev, pg, e) || cf_evidence_model(m, cs->mode, golden, ev, e);
    cf_tset_free(&in);
    return rc ? -1 : 0;
}

static int open_model(m3_model *m, const cf_case *cs, m3_err *e)
{
    m3_model_opts mo = {0};
    memset(m, 0, sizeof *m);
    if (m3_model_open(m, cs->dir, &mo, e))
        return m3_fail_prefix(e, "case %s", cs->id);
    return 0;
}

/* ---- check ---------------------------------------------------------------------------- */
/* Load a port's dump judged against golden (cf_tset_load_dump) and check its
 * metadata: m3.dump_version, when present, must be "1"; m3.unsupported (copied
 * into caps) may name known capabilities only. */
static int load_dump(cf_tset *dump, cf_tset *misshaped, const char *path, const cf_tset *golden,
                     char *unrec, size_t ucap, char *caps, size_t ccap, m3_err *e)
{
    char ver[64];
    if (cf_tset_load_dump(dump, misshaped, path, golden, unrec, ucap, e) ||
        cf_st_meta(path, "m3.dump_version", ver, sizeof ver, e) ||
        cf_st_meta(path, "m3.unsupported", caps, ccap, e))
        return -1;
    if (ver[0] && strcmp(ver, "1") != 0)
        return m3_fail(e, "%s: m3.dump_version \"%s\" is not supported (this kit reads version 1, "
                          "M3-DUMP-1)",
                       path, ver);
    char origin[2200];
    snprintf(origin, sizeof origin, "%s: m3.unsupported", path);
    return check_cap_names(caps, origin, e);
}

/* Teacher-forced: the first of the dump's layer inputs (and the last layer's
 * output, which feeds the head) holding NaN or Inf; NULL when all are finite. */
static const char *nonfinite_feed(const cf_tset *dump, const m3_model *m)
{
    static const char *const none = NULL;
    if (!m)
        return none;
    for (int i = 0; i < dump->n; i++) {
        const cf_tensor *t = &dump->t[i];
        size_t n = strlen(t->name);
        int feed = strncmp(t->name, "layers.", 7) == 0 &&
                   ((n > 6 && strcmp(t->name + n - 6, ".input") == 0) ||
                    (n > 7 && strcmp(t->name + n - 7, ".output") == 0 && !strstr(t->name, "attn.") &&
                     !strstr(t->name, "mlp.")));
        if (!feed || t->is_int || !t->f)
            continue;
        for (size_t j = 0; j < t->n; j++)
            if (!isfinite(t->f[j]))
                return t->name;
    }
    return none;
}

/* Golden tensors whose shape disagrees with the case (T = params.T, H and V of
 * the model): the suite's fault, an InternalError. */
static int check_golden_shapes(const cf_case *cs, const m3_model *m, const cf_tset *g, m3_err *e)
{
    double Td = -1;
    if (!m || cf_case_num_or(cs, "T", -1, &Td, e))
        return m ? -1 : 0;
    const int64_t T = (int64_t)Td, H = m->cfg.text.hidden_size, V = m->cfg.text.vocab_size;
    for (int i = 0; i < g->n; i++) {
        const cf_tensor *t = &g->t[i];
        int64_t want1 = -1;
        if (strcmp(t->name, "logits") == 0)
            want1 = V;
        else if (strcmp(t->name, "embeddings") == 0 || strcmp(t->name, "final_norm") == 0 ||
                 (strncmp(t->name, "layers.", 7) == 0 && t->ndim == 2 && !strstr(t->name, "moe.")))
            want1 = H;
        if (want1 < 0)
            continue;
        if (t->ndim != 2 || (T >= 0 && t->shape[0] != T) || t->shape[1] != want1)
            return m3_fail(e, "%s/expected.safetensors: golden %s has shape [%lld%s%lld] but the case "
                              "has T %lld and the model %s %lld (a bad vector)",
                           cs->dir, t->name, (long long)t->shape[0], t->ndim > 1 ? ", " : " ",
                           (long long)(t->ndim > 1 ? t->shape[1] : 0), (long long)T,
                           want1 == V ? "vocab_size" : "hidden_size", (long long)want1);
    }
    if (cs->max_new_tokens > 0) {
        const cf_tensor *t = cf_tset_get(g, "greedy_tokens");
        if (t && (t->ndim != 1 || t->shape[0] != cs->max_new_tokens))
            return m3_fail(e, "%s/expected.safetensors: golden greedy_tokens has %lld entries but "
                              "params.max_new_tokens is %d (a bad vector)",
                           cs->dir, (long long)(t->ndim ? t->shape[0] : 0), cs->max_new_tokens);
    }
    return 0;
}
/* Judge the dump file `path` of case cs against its golden outputs (teacher-forced: against
 * the reference run on the dump's own layer inputs), print and keep the report, and store its
 * verdict. Returns -1 with e set on bad input or allocation failure. */
static int judge_dump(ctx *c, const cf_case *cs, const cf_profile *prof, const m3_model *model,
                      const cf_tset *golden, const cf_tset *ev, const char *ev_from, const char *path, int tf,
                      const char *unsupported_in, cf_result *verdict, m3_err *e)
{
    cf_tset dump = {0}, tf_golden = {0}, tf_ev = {0};
    char meta[512], unsupported[1024];
    unsigned char *want = NULL, *want_logits = NULL;
    cf_report r;
    int rc = -1;
    double t0 = now();
    snprintf(unsupported, sizeof unsupported, "%s", unsupported_in);
    init_report(&r, cs, tf ? "#teacher-forced" : "", prof->name, "dump");
    cf_tset misshaped = {0};
    if (load_dump(&dump, &misshaped, path, golden, r.unrecognised, sizeof r.unrecognised, meta,
                  sizeof meta, e)) {
        cf_tset_free(&misshaped);
        goto out;
    }
    append_caps(unsupported, sizeof unsupported, meta);
    /* row subsets (M3-DUMP-10) and the rows the case wants (M3-DUMP-11) */
    const cf_tensor *gin = cf_tset_get(golden, "layers.0.input");
    long T = gin && gin->ndim == 2 ? (long)gin->shape[0] : 0;
    if (cf_rows_validate(&dump, path, T, e))
        goto out;
    const cJSON *sel = cJSON_GetObjectItemCaseSensitive(cs->params, "rows");
    const cJSON *lsel = cJSON_GetObjectItemCaseSensitive(cs->params, "logits_rows");
    char where[2400];
    snprintf(where, sizeof where, "%s/case.json", cs->dir);
    int block = model ? model->cfg.text.index_block_size : 0;
    if (cJSON_IsString(sel) && T > 0) {
        if (!(want = malloc((size_t)T))) {
            m3_fail(e, "out of memory");
            goto out;
        }
        if (cf_rows_select(sel->valuestring, T, block, where, want, e))
            goto out;
    }
    if (cJSON_IsString(lsel) && T > 0) {
        if (!(want_logits = malloc((size_t)T))) {
            m3_fail(e, "out of memory");
            goto out;
        }
        if (cf_rows_select(lsel->valuestring, T, block, where, want_logits, e))
            goto out;
    }
    const char *bad_feed = tf ? nonfinite_feed(&dump, model) : NULL;
    cf_judge_ctx jc = {.c = cs, .profile = prof, .model = model, .evidence = ev_from[0] ? ev : NULL,
                       .unsupported = unsupported, .teacher_forced = tf, .want = want, .want_T = T,
                       .want_sel = cJSON_IsString(sel) ? sel->valuestring : NULL, .misshaped = &misshaped,
                       .bad_feed = bad_feed, .want_logits = want_logits,
                       .want_logits_sel = cJSON_IsString(lsel) ? lsel->valuestring : NULL,
                       .evidence_from = ev_from[0] ? ev_from : NULL};
    if (tf && model) {
        /* teacher forcing runs each layer from the dump's own input: every position of it */
        for (int i = 0; i < model->cfg.text.num_layers; i++) {
            char nm[64];
            snprintf(nm, sizeof nm, "layers.%d.input", i);
            const cf_tensor *x = cf_tset_get(&dump, nm);
            if (x && cf_tensor_subset(x, cf_rows_of(&dump, nm), T)) {
                m3_fail(e, "%s: teacher forcing needs every position of \"%s\"; its rows hold %lld of %ld "
                           "(M3-DUMP-10)", path, nm, (long long)x->shape[0], T);
                goto out;
            }
        }
    }
    if (tf) {
        /* golden per layer = the reference layer run on the dump's own layer input */
        m3_progress_task(&c->pg, "teacher-forced golden", M3_UNIT_ROWS, 0);
        int trc = cf_ref_teacher_forced(model, cs->mode, &dump, &tf_golden, &c->pg, e);
        m3_progress_end(&c->pg);
        if (trc)
            goto out;
        const cf_tensor *emb = cf_tset_get(golden, "embeddings");
        if (emb && cf_tset_add_f(&tf_golden, "embeddings", emb->ndim, emb->shape, emb->f, e))
            goto out;
        /* the teacher-forced golden's tie evidence, computed with it (M3-VEC-11) */
        if (cf_evidence_model(model, cs->mode, &tf_golden, &tf_ev, e))
            goto out;
        jc.evidence = &tf_ev;
        jc.evidence_from = "computed with the teacher-forced golden";
        if (cf_judge(&r, &jc, &dump, &tf_golden, e))
            goto out;
    } else if (cf_judge(&r, &jc, &dump, golden, e)) {
        goto out;
    }
    cf_tset_free(&misshaped);
    r.seconds = now() - t0;
    emit(c, &r, 1, 1);
    if (!keep(c, &r)) {
        m3_fail(e, "out of memory keeping the report of %s", path);
        goto out;
    }
    *verdict = r.result;
    rc = 0;
out:
    if (rc)
        cf_report_free(&r);
    cf_tset_free(&dump);
    cf_tset_free(&tf_golden);
    cf_tset_free(&tf_ev);
    free(want);
    free(want_logits);
    return rc;
}

/* check's exit status for a verdict. */
static int check_status(cf_result res)
{
    return res == CF_INTERNAL_ERROR ? 2 : cf_result_conforms(res) ? 0 : res == CF_TIE_DIVERGED ? 3 : 1;
}

/* check --teacher-forced on a checkpoint (--model DIR) or a case, in slices and jobs (M3-DUMP-12). */
static int cmd_check_tf(ctx *c)
{
    opts *o = c->o;
    m3_err e = {{0}};
    int jobs = 1, rc = 2, have_model = 0, have_case = 0;
    m3_model model;
    cf_case cs;
    cf_report r;
    cf_slice sl;
    memset(&r, 0, sizeof r);
    if (!o->teacher_forced) {
        fprintf(stderr, "m3-conform check: --model, --layers, --jobs and --result judge teacher-forced; add "
                        "--teacher-forced\n");
        return 2;
    }
    if (o->tie_dump || o->no_settle) {
        fprintf(stderr, "m3-conform check: --tie-dump and --no-settle apply to free-running checks only\n");
        return 2;
    }
    if (o->jobs_s && cf_parse_jobs(o->jobs_s, &jobs, &e))
        goto bad;
    const char *dir = o->model_dir ? o->model_dir : o->case_dir;
    char cfgp[2300], meta[64] = "";
    snprintf(cfgp, sizeof cfgp, "%s/config.json", dir);
    if (cf_st_meta(o->dump, "m3.mode", meta, sizeof meta, &e))
        goto bad;
    if (o->case_dir) {
        if (cf_case_load(&cs, o->case_dir, !o->no_hash, &e))
            goto bad;
        have_case = 1;
        if (strcmp(cs.component, "model") != 0) {
            m3_fail(&e, "%s: --teacher-forced applies to model cases only", o->case_dir);
            goto bad;
        }
    } else {
        /* no case: one made up for the checkpoint */
        const char *mode = o->mode ? o->mode : "fp32";
        const char *prof = o->profile ? o->profile : strcmp(meta, "fp32") == 0 ? "fp32" : "bf16";
        if (strcmp(mode, "fp32") && strcmp(mode, "bf16")) {
            m3_fail(&e, "--mode \"%s\": want fp32 (the golden mode) or bf16", mode);
            goto bad;
        }
        const char *base = strrchr(dir, '/');
        base = base && base[1] ? base + 1 : dir;
        char json[800];
        snprintf(json, sizeof json, "{\"id\": \"checkpoint.%.200s\", \"component\": \"model\", \"mode\": \"%s\", "
                 "\"profile\": \"%.60s\"}", base, mode, prof);
        for (char *q = json; *q; q++)
            if ((unsigned char)*q < 0x20)
                *q = ' ';
        if (cf_case_parse(&cs, json, strlen(json), dir, &e))
            goto bad;
        have_case = 1;
    }
    const cf_profile *prof = pick_profile(c, &cs, o->profile, &e);
    if (!prof)
        goto bad;
    m3_model_opts mo = {0};
    memset(&model, 0, sizeof model);
    if (m3_model_open(&model, dir, &mo, &e))
        goto bad;
    have_model = 1;
    int from = -1, to = -1;
    if (o->layers && cf_parse_layers(o->layers, model.cfg.text.num_layers, &from, &to, &e))
        goto bad;
    cf_tf_opts to_ = {&model, &cs, prof, &c->tol, cs.mode, o->dump, cfgp, o->unsupported, from, to, jobs,
                      o->timing, &c->pg};
    double t0 = now();
    if (cf_tf_check(&to_, &r, &sl, &e))
        goto bad;
    r.seconds = now() - t0;
    emit(c, &r, 1, 1);
    if (o->result && cf_slice_write(o->result, &sl, &r, &e)) {
        cf_report_free(&r);
        goto bad;
    }
    if (sl.from > 0 || !sl.head)
        printf("  slice: layers %d-%d of %d%s; combine the slices with m3-conform merge\n", sl.from, sl.to, sl.L,
               sl.head ? " and the head" : "");
    rc = check_status(r.result);
    if (!keep(c, &r))
        cf_report_free(&r);
    goto done;
bad:
    fprintf(stderr, "m3-conform: %s\n", e.msg);
    rc = 2;
done:
    if (have_model)
        m3_model_close(&model);
    if (have_case)
        cf_case_free(&cs);
    return rc;
}

/* merge: slice results into one verdict (M3-DUMP-12). */
static int cmd_merge(ctx *c)
{
    opts *o = c->o;
    if (o->npaths < 1) {
        fprintf(stderr, "m3-conform merge: needs one or more slice results (RESULT.json ...)\n");
        return 2;
    }
    m3_err e = {{0}};
    cf_slice *sl = calloc((size_t)o->npaths, sizeof *sl);
    int n = 0, rc = 2;
    cf_report r;
    if (!sl) {
        fprintf(stderr, "m3-conform: out of memory\n");
        return 2;
    }
    for (; n < o->npaths; n++)
        if (cf_slice_load(&sl[n], o->paths[n], &c->tol, &e))
            goto bad;
    if (cf_slice_merge(&r, sl, n, &e))
        goto bad;
    emit(c, &r, 1, o->verbose);
    rc = check_status(r.result);
    if (!keep(c, &r))
        cf_report_free(&r);
    goto done;
bad:
    fprintf(stderr, "m3-conform: %s\n", e.msg);
done:
    for (int k = 0; k < n; k++)
        cf_slice_free(&sl[k]);
    free(sl);
    return rc;
}

static int cmd_check(ctx *c)
{
    opts *o = c->o;
    if (o->model_dir && o->case_dir) {
        fprintf(stderr, "m3-conform check: --model DIR judges against a checkpoint, --case DIR against a case; "
                        "give one\n");
        return 2;
    }
    if (o->dump && !o->npaths && (o->model_dir || o->layers || o->jobs_s || o->result) &&
        !(o->model_dir && o->case_dir))
        return cmd_check_tf(c);
    if (!o->case_dir || !o->dump || o->npaths) {
        fprintf(stderr, "m3-conform check: needs --case DIR and --dump FILE (and no other arguments)\n");
        usage(stderr);
        return 2;
    }
    if (o->tie_dump && (o->teacher_forced || o->no_settle)) {
        fprintf(stderr, "m3-conform check: --tie-dump settles a TieDiverged free-running --dump; it "
                        "does not combine with %s\n",
                o->teacher_forced ? "--teacher-forced" : "--no-settle");
        return 2;
    }
    m3_err e = {{0}};
    cf_case cs;
    if (cf_case_load(&cs, o->case_dir, !o->no_hash, &e)) {
        fprintf(stderr, "m3-conform: %s\n", e.msg);
        snprintf(c->fatal, sizeof c->fatal, "%s", e.msg);
        return 2;
    }
    int rc = 2, is_model = strcmp(cs.component, "model") == 0, computed = 0;
    cf_tset golden = {0}, ev = {0};
    char ev_from[2100];
    m3_model model;
    int have_model = 0;
    cf_result res = CF_INTERNAL_ERROR;
    const cf_profile *prof = pick_profile(c, &cs, o->profile, &e);
    if (!prof)
        goto bad;
    if ((o->teacher_forced || o->tie_dump) && !is_model) {
        fprintf(stderr, "m3-conform: %s applies to model cases only\n",
                o->teacher_forced ? "--teacher-forced" : "--tie-dump");
        goto bad_quiet;
    }
    if (is_model) {
        if (open_model(&model, &cs, &e)) {
            char p[2300];
            snprintf(p, sizeof p, "%s/expected.safetensors", cs.dir);
            if (!exists(p) || o->teacher_forced || o->tie_dump)
                goto bad;
            fprintf(stderr, "m3-conform: note: %s; ties are judged strictly\n", e.msg);
        } else {
            have_model = 1;
        }
    }
    m3_progress_task(&c->pg, "golden", M3_UNIT_ROWS, 0);
    int grc = golden_of(&cs, have_model ? &model : NULL, !o->no_hash, &golden, &computed, &ev, ev_from,
                        sizeof ev_from, 1, &c->pg, &e);
    m3_progress_end(&c->pg);
    if (grc)
        goto bad;
    if (is_model && check_golden_shapes(&cs, have_model ? &model : NULL, &golden, &e)) {
        /* the suite's fault: an InternalError report, exit 2 */
        cf_report ir;
        init_report(&ir, &cs, "", prof->name, "dump");
        internal_error(&ir, &e);
        emit(c, &ir, 1, 1);
        keep(c, &ir);
        goto bad;
    }
    if (!computed && evidence_of(&cs, !o->no_hash, &golden, &ev, ev_from, sizeof ev_from, &e))
        goto bad;
    const m3_model *mp = have_model ? &model : NULL;
    if (judge_dump(c, &cs, prof, mp, &golden, &ev, ev_from, o->dump, o->teacher_forced, o->unsupported,
                   &res, &e))
        goto bad;
    rc = check_status(res);
    if (rc == 3 && !o->no_settle) {
        /* M3-TOL-8 4: settle it teacher-forced, every layer judged from its own input (the
         * dump's, or the port's teacher-forced dump's); greedy tokens are a free-running
         * output, judged above, so they are left out of this judgement. */
        const char *tf_path = o->tie_dump ? o->tie_dump : o->dump;
        char caps[1024];
        snprintf(caps, sizeof caps, "%s", o->unsupported);
        append_caps(caps, sizeof caps, "greedy");
        printf("m3-conform: TieDiverged; settling it teacher-forced (M3-TOL-8): %s\n", tf_path);
        if (judge_dump(c, &cs, prof, mp, &golden, &ev, ev_from, tf_path, 1, caps, &res, &e))
            goto bad;
        rc = check_status(res) == 0 ? 0 : check_status(res) == 2 ? 2 : 1;
        printf("m3-conform: %s\n",
               rc == 0   ? "conforms: every difference is a consequence of accepted ties (M3-TOL-8)"
               : rc == 1 ? "does not conform: the teacher-forced judgement fails"
                         : "internal error in the teacher-forced judgement");
    } else if (o->tie_dump) {
        printf("m3-conform: not TieDiverged; --tie-dump %s was not needed\n", o->tie_dump);
    }
    goto done;
bad:
    m3_progress_end(&c->pg);
    fprintf(stderr, "m3-conform: %s\n", e.msg);
    snprintf(c->fatal, sizeof c->fatal, "%s", e.msg);
bad_quiet:
    rc = 2;
done:
    cf_tset_free(&golden);
    cf_tset_free(&ev);
    if (have_model)
        m3_model_close(&model);
    cf_case_free(&cs);
    return rc;
}

/* ---- rows: the positions a case wants (M3-DUMP-11) ------------------------------------------- */
static int cmd_rows(ctx *c)
{
    opts *o = c->o;
    if (!o->case_dir || o->npaths) {
        fprintf(stderr, "m3-conform rows: needs --case DIR (and no other arguments)\n");
        return 2;
    }
    m3_err e = {{0}};
    cf_case cs;
    if (cf_case_load(&cs, o->case_dir, !o->no_hash, &e)) {
        fprintf(stderr, "m3-conform: %s\n", e.msg);
        return 2;
    }
    int rc = 2;
    cf_tset in = {0};
    m3_config cfg;
    unsigned char *want = NULL;
    char p[2300], where[2400];
    snprintf(p, sizeof p, "%s/inputs.safetensors", cs.dir);
    snprintf(where, sizeof where, "%s/case.json", cs.dir);
    const char *key = o->logits ? "logits_rows" : "rows";
    const cJSON *sel = cJSON_GetObjectItemCaseSensitive(cs.params, key);
    if (!sel && o->logits)
        sel = cJSON_GetObjectItemCaseSensitive(cs.params, "rows");
    if (cf_tset_load(&in, p, &e))
        goto bad;
    const cf_tensor *ids = cf_tset_get(&in, "input_ids");
    if (!ids || !ids->is_int || ids->ndim != 1 || ids->n == 0) {
        m3_fail(&e, "%s: needs \"input_ids\", a non-empty integer vector [T]", p);
        goto bad;
    }
    long T = (long)ids->n;
    if (!(want = malloc((size_t)T))) {
        m3_fail(&e, "out of memory");
        goto bad;
    }
    if (!cJSON_IsString(sel)) {
        memset(want, 1, (size_t)T); /* no selector: every position */
    } else {
        char cp[2300];
        snprintf(cp, sizeof cp, "%s/config.json", cs.dir);
        if (m3_config_load(&cfg, cp, NULL, &e))
            goto bad;
        if (cf_rows_select(sel->valuestring, T, cfg.text.index_block_size, where, want, &e))
            goto bad;
    }
    for (long q = 0, n = 0; q < T; q++)
        if (want[q])
            printf("%s%ld", n++ ? "," : "", q);
    printf("\n");
    rc = 0;
    goto done;
bad:
    fprintf(stderr, "m3-conform: %s\n", e.msg);
done:
    free(want);
    cf_tset_free(&in);
    cf_case_free(&cs);
    return rc;
}

/* ---- run --------------------------------------------------------------------------------- */
typedef struct tally {
    int dirs; /* case directories (a case judged chunked / teacher-forced too counts once) */
    int cases, conform, fail, internal, diverged;
    int mutants, killed, localised, survived, mislocalised, pass_expected, pass_ok;
} tally;

static void tally_add(tally *t, cf_result res)
{
    if (res == CF_INTERNAL_ERROR)
        t->internal++;
    else if (cf_result_conforms(res))
        t->conform++;
    else if (res == CF_TIE_DIVERGED)
        t->diverged++;
    else
        t->fail++;
}

/* Run the reference on one case and judge it (plus chunked and teacher-forced variants). */
static void run_case(ctx *c, const char *dir, tally *t, int idx, int total)
{
    opts *o = c->o;
    m3_err e = {{0}};
    cf_case cs;
    cf_report r;
    double t0 = now();
    char label[160];
    snprintf(label, sizeof label, "case %d/%d %.100s", idx + 1, total, dir);
    m3_progress_task(&c->pg, label, M3_UNIT_ROWS, 0);
    t->dirs++;
    if (cf_case_load(&cs, dir, !o->no_hash, &e)) {
        init_report(&r, NULL, "", o->profile, "ref");
        snprintf(r.id, sizeof r.id, "%s", dir);
        internal_error(&r, &e);
        t->cases++;
        t->internal++;
        emit(c, &r, 1, 0);
        keep(c, &r);
        return;
    }
    const cf_profile *prof = pick_profile(c, &cs, o->profile, &e);
    int is_model = strcmp(cs.component, "model") == 0;
    cf_tset golden = {0}, out = {0}, in = {0}, ev = {0};
    char ev_from[2100] = "";
    int computed = 0;
    m3_model model;
    int have_model = 0;
    char p[2300];
    snprintf(p, sizeof p, "%s/expected.safetensors", cs.dir);
    init_report(&r, &cs, "", prof ? prof->name : "?", "ref");
    if (!prof || (exists(p) && golden_of(&cs, NULL, !o->no_hash, &golden, &computed, &ev, ev_from, sizeof ev_from,
                                         0, &c->pg, &e))) {
        internal_error(&r, &e);
        goto finish;
    }
    if (!exists(p)) { /* as check does: the reference's own outputs are the golden */
        m3_model gm;
        int hm = is_model && open_model(&gm, &cs, &e) == 0;
        int grc = (is_model && !hm) || golden_of(&cs, hm ? &gm : NULL, !o->no_hash, &golden, &computed, &ev, ev_from,
                                                 sizeof ev_from, 0, &c->pg, &e);
        if (hm)
            m3_model_close(&gm);
        if (grc) {
            internal_error(&r, &e);
            goto finish;
        }
        if (!o->quiet)
            printf("note: %s has no expected.safetensors; judged against the reference's own run\n",
                   cs.dir);
    }
    const cf_tset *evp = ev_from[0] ? &ev : NULL;
    const char *evf = ev_from[0] ? ev_from : NULL;
    if (!is_model) {
        if (cf_ref_component(&cs, &out, &e)) {
            internal_error(&r, &e);
            goto finish;
        }
        cf_judge_ctx jc = {.c = &cs, .profile = prof, .evidence = evp, .unsupported = "", .evidence_from = evf};
        if (cf_judge(&r, &jc, &out, &golden, &e))
            internal_error(&r, &e);
        goto finish;
    }
    snprintf(p, sizeof p, "%s/inputs.safetensors", cs.dir);
    if (open_model(&model, &cs, &e) || (have_model = 1, cf_tset_load(&in, p, &e)) ||
        cf_ref_model(&cs, &model, &in, 0, &out, &c->pg, &e)) {
        internal_error(&r, &e);
        goto finish;
    }
    {
        cf_judge_ctx jc = {.c = &cs, .profile = prof, .model = &model, .evidence = evp, .unsupported = "",
                           .evidence_from = evf};
        if (cf_judge(&r, &jc, &out, &golden, &e))
            internal_error(&r, &e);
    }
    /* chunked prefill must give the same activations (and tokens) */
    if (cs.nchunks > 0) {
        r.seconds = now() - t0;
        t->cases++;
        tally_add(t, r.result);
        emit(c, &r, !o->quiet && (o->verbose || !cf_result_conforms(r.result)), o->verbose);
        keep(c, &r);
        t0 = now();
        cf_tset ch = {0};
        init_report(&r, &cs, "#chunked", prof->name, "ref");
        cf_judge_ctx jc = {.c = &cs, .profile = prof, .model = &model, .evidence = evp, .unsupported = "",
                           .evidence_from = evf};
        snprintf(label, sizeof label, "case %d/%d %.100s, chunked", idx + 1, total, dir);
        m3_progress_task(&c->pg, label, M3_UNIT_ROWS, 0);
        if (cf_ref_model(&cs, &model, &in, 1, &ch, &c->pg, &e) || cf_judge(&r, &jc, &ch, &golden, &e))
            internal_error(&r, &e);
        cf_tset_free(&ch);
    }
    if (o->teacher_forced) {
        r.seconds = now() - t0;
        t->cases++;
        tally_add(t, r.result);
        emit(c, &r, !o->quiet && (o->verbose || !cf_result_conforms(r.result)), o->verbose);
        keep(c, &r);
        t0 = now();
        cf_tset tf = {0};
        init_report(&r, &cs, "#teacher-forced", prof->name, "ref");
        /* the reference run teacher-forced from the golden's layer inputs, judged against the golden */
        cf_judge_ctx jc = {.c = &cs, .profile = prof, .model = &model, .evidence = evp, .unsupported = "",
                           .teacher_forced = 1, .evidence_from = evf};
        const cf_tensor *emb = cf_tset_get(&out, "embeddings");
        snprintf(label, sizeof label, "case %d/%d %.100s, teacher-forced", idx + 1, total, dir);
        m3_progress_task(&c->pg, label, M3_UNIT_ROWS, 0);
        if (cf_ref_teacher_forced(&model, cs.mode, &golden, &tf, &c->pg, &e) ||
            (emb && cf_tset_add_f(&tf, "embeddings", emb->ndim, emb->shape, emb->f, &e)) ||
            cf_judge(&r, &jc, &tf, &golden, &e))
            internal_error(&r, &e);
        /* greedy tokens and eagle3 taps are not per-layer quantities */
        cf_tset_free(&tf);
    }
finish:
    m3_progress_end(&c->pg);
    r.seconds = now() - t0;
    t->cases++;
    tally_add(t, r.result);
    emit(c, &r, !o->quiet && (o->verbose || !cf_result_conforms(r.result)), o->verbose);
    keep(c, &r);
    cf_tset_free(&golden);
    cf_tset_free(&ev);
    cf_tset_free(&out);
    cf_tset_free(&in);
    if (have_model)
        m3_model_close(&model);
    cf_case_free(&cs);
}

/* Judge one mutant dump; returns 1 when it behaved as its mutant.json says. */
static int run_mutant(ctx *c, const char *dir, const char *root, tally *t, char *line, size_t cap)
{
    opts *o = c->o;
    m3_err e = {{0}};
    cf_mutant mu;
    cf_case cs;
    cf_report r;
    int ok = 0, have_case = 0, have_model = 0;
    cf_tset dump = {0}, golden = {0}, aux = {0}, ev = {0};
    char ev_from[2100] = "";
    m3_model model;
    double t0 = now();
    memset(&r, 0, sizeof r);
    if (cf_mutant_load(&mu, dir, root, &e)) {
        snprintf(line, cap, "%-28s INTERNAL ERROR: %s", dir, e.msg);
        t->mutants++;
        return 0;
    }
    t->mutants++;
    if (mu.expect_pass)
        t->pass_expected++;
    if ((!o->no_hash && cf_mutant_verify(&mu, &e)) || cf_case_load(&cs, mu.case_dir, !o->no_hash, &e)) {
        snprintf(line, cap, "%-28s INTERNAL ERROR: %s", mu.id, e.msg);
        return 0;
    }
    have_case = 1;
    const cf_profile *prof = pick_profile(c, &cs, mu.profile[0] ? mu.profile : NULL, &e);
    int computed = 0;
    if (!prof) {
        snprintf(line, cap, "%-28s INTERNAL ERROR: %s", mu.id, e.msg);
        goto done;
    }
    init_report(&r, &cs, "", prof->name, "mutant");
    snprintf(r.id, sizeof r.id, "mutant:%s", mu.id);
    if (strcmp(cs.component, "model") == 0) {
        if (open_model(&model, &cs, &e))
            goto ierr;
        have_model = 1;
    }
    char caps[1024] = "";
    char label[300];
    snprintf(label, sizeof label, "mutant %.200s: golden", mu.id);
    m3_progress_task(&c->pg, label, M3_UNIT_ROWS, 0);
    int grc = golden_of(&cs, have_model ? &model : NULL, !o->no_hash, &golden, &computed, &ev, ev_from,
                        sizeof ev_from, 0, &c->pg, &e) ||
              load_dump(&dump, &aux, mu.dump, &golden, r.unrecognised, sizeof r.unrecognised, caps,
                        sizeof caps, &e);
    m3_progress_end(&c->pg);
    if (grc)
        goto ierr;
    cf_tset_free(&aux); /* mis-shaped tensors of a mutant dump: judged missing */
    {
        cf_judge_ctx jc = {.c = &cs, .profile = prof, .model = have_model ? &model : NULL,
                           .evidence = ev_from[0] ? &ev : NULL, .unsupported = caps,
                           .evidence_from = ev_from[0] ? ev_from : NULL};
        if (cf_judge(&r, &jc, &dump, &golden, &e))
            goto ierr;
    }
    r.seconds = now() - t0;
    int conforms = cf_result_conforms(r.result);
    /* a TieDiverged dump (M3-TOL-8) is localised at its first tie divergence */
    const cf_record *ff = r.first_fail >= 0       ? &r.rec[r.first_fail]
                          : r.first_diverged >= 0 ? &r.rec[r.first_diverged]
                                                  : NULL;
    char got[300] = "none";
    if (ff)
        snprintf(got, sizeof got, "%s [%s]", ff->tensor, ff->component);
    if (mu.expect_pass) {
        ok = conforms;
        t->pass_ok += ok;
        snprintf(line, cap, "%-28s expect PASS (%s)  -> %s%s", mu.id, prof->name, cf_result_name(r.result),
                 ok ? "  ok" : "  WRONG: a faithful dump must conform");
        if (!ok && ff)
            snprintf(line + strlen(line), cap - strlen(line), "; first divergence %s: %s", got, ff->msg);
    } else if (conforms) {
        t->survived++;
        snprintf(line, cap, "%-28s SURVIVED (%s): the kit did not catch it", mu.id, cf_result_name(r.result));
    } else {
        t->killed++;
        int loc = ff != NULL;
        if (ff && mu.expect_tensor[0])
            loc = loc && strcmp(ff->tensor, mu.expect_tensor) == 0;
        if (ff && mu.expect_layer >= 0)
            loc = loc && ff->layer == mu.expect_layer;
        if (ff && mu.expect_component[0])
            loc = loc && strcmp(ff->component, mu.expect_component) == 0;
        ok = loc;
        if (loc)
            t->localised++;
        else
            t->mislocalised++;
        snprintf(line, cap, "%-28s killed, %s: first divergence %s", mu.id,
                 loc ? "localised" : "MIS-LOCALISED", got);
        if (!loc)
            snprintf(line + strlen(line), cap - strlen(line), " (expected %s%s layer %d%s%s)", mu.expect_tensor,
                     mu.expect_tensor[0] ? "," : "", mu.expect_layer, mu.expect_component[0] ? ", " : "",
                     mu.expect_component);
    }
    emit(c, &r, o->verbose, 0);
    keep(c, &r);
    memset(&r, 0, sizeof r);
    goto verdict;
ierr:
    snprintf(line, cap, "%-28s INTERNAL ERROR: %s", mu.id, e.msg);
    cf_report_free(&r);
verdict:
    /* one synthetic JUnit record per mutant: Pass when it behaved as declared */
    init_report(&r, &cs, "", prof ? prof->name : "?", "mutant-verdict");
    snprintf(r.id, sizeof r.id, "mutant:%s", mu.id);
    snprintf(r.component, sizeof r.component, "mutant");
    r.result = ok ? CF_PASS : CF_FAIL;
    if (!ok)
        snprintf(r.error, sizeof r.error, "%.1000s", line);
    r.seconds = now() - t0;
    keep(c, &r);
    memset(&r, 0, sizeof r);
done:
    cf_tset_free(&dump);
    cf_tset_free(&golden);
    cf_tset_free(&ev);
    cf_tset_free(&aux);
    if (have_model)
        m3_model_close(&model);
    if (have_case)
        cf_case_free(&cs);
    return ok;
}

static int cmd_run(ctx *c)
{
    opts *o = c->o;
    if (o->target && strcmp(o->target, "ref") != 0) {
        fprintf(stderr, "m3-conform run: target \"%s\" is not available in this build (only \"ref\"); "
                        "judge other implementations with `m3-conform check` on their dumps\n", o->target);
        return 2;
    }
    const char *defaults[1] = {"vectors/manifest.json"};
    const char **paths = o->npaths ? o->paths : defaults;
    int np = o->npaths ? o->npaths : 1;
    tally t;
    memset(&t, 0, sizeof t);
    int all_ok = 1;
    double t0 = now();
    for (int k = 0; k < np; k++) {
        m3_err e = {{0}};
        char mpath[2300];
        const char *p = paths[k];
        snprintf(mpath, sizeof mpath, "%s/case.json", p);
        if (is_dir(p) && exists(mpath)) { /* a single case directory */
            c->suite = p;
            run_case(c, p, &t, 0, 1);
            continue;
        }
        if (is_dir(p))
            snprintf(mpath, sizeof mpath, "%s/manifest.json", p);
        else
            snprintf(mpath, sizeof mpath, "%s", p);
        cf_manifest m;
        if (cf_manifest_load(&m, mpath, &e)) {
            fprintf(stderr, "m3-conform: %s\n", e.msg);
            snprintf(c->fatal, sizeof c->fatal, "%s", e.msg);
            return 2;
        }
        c->suite = m.suite[0] ? m.suite : mpath;
        snprintf(c->suite_name, sizeof c->suite_name, "%s", c->suite);
        printf("suite %s %s: %d cases, %d mutants (%s)", m.suite, m.version, m.ncases,
               o->no_mutants ? 0 : m.nmutants, mpath);
        if (m.nskipped)
            printf("; %d big cases not generated here (make vectors-big) skipped", m.nskipped);
        printf("\n");
        fflush(stdout);
        for (int i = 0; i < m.ncases; i++)
            run_case(c, m.cases[i], &t, i, m.ncases);
        if (!o->no_mutants && m.nmutants) {
            printf("mutants (each dump judged against its case's golden):\n");
            for (int i = 0; i < m.nmutants; i++) {
                char line[2048];
                int ok = run_mutant(c, m.mutants[i], m.root, &t, line, sizeof line);
                all_ok &= ok;
                printf("  %s\n", line);
            }
        }
        c->suite = NULL;
        cf_manifest_free(&m);
    }
    int fail_mutants = t.mutants - t.pass_expected;
    printf("summary: %d case%s", t.dirs, t.dirs == 1 ? "" : "s");
    if (t.cases != t.dirs)
        printf(", %d judgements (chunked and teacher-forced runs included)", t.cases);
    printf(": %d conform, %d fail, %d internal errors", t.conform, t.fail, t.internal);
    if (t.diverged)
        printf(", %d inconclusive (TieDiverged, M3-TOL-8)", t.diverged);
    printf(" (%.1fs)\n", now() - t0);
    if (t.mutants) {
        printf("mutation score: %d/%d mutants killed and localised (%d killed, %d mis-localised, %d survived)",
               t.localised, fail_mutants, t.killed, t.mislocalised, t.survived);
        if (t.pass_expected)
            printf("; faithful dumps passing: %d/%d", t.pass_ok, t.pass_expected);
        printf("\n");
    }
    if (t.fail || t.internal || t.diverged || t.mutants != t.localised + t.pass_ok)
        all_ok = 0;
    printf("verdict: %s\n", all_ok ? "PASS" : "FAIL");
    return all_ok ? 0 : 1;
}

/* ---- golden ----------------------------------------------------------------------------- */
static int cmd_golden(int argc, char **argv)
{
    const char *dir = NULL, *out = NULL, *evp = NULL;
    int verify = 1, quiet = 0;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--quiet") == 0) {
            quiet = 1;
        } else if ((strcmp(argv[i], "--case") == 0 || strcmp(argv[i], "--out") == 0 ||
                    strcmp(argv[i], "--evidence") == 0) && i + 1 < argc) {
            if (argv[i][2] == 'c')
                dir = argv[++i];
            else if (argv[i][2] == 'o')
                out = argv[++i];
            else
                evp = argv[++i];
        } else if (strcmp(argv[i], "--no-hash") == 0) {
            verify = 0;
        } else {
            fprintf(stderr, "m3-conform golden: unexpected argument \"%s\"; usage: m3-conform golden "
                            "--case DIR [--out FILE] [--evidence FILE] [--no-hash] [--quiet]\n", argv[i]);
            return 2;
        }
    }
    if (!dir) {
        fprintf(stderr, "m3-conform golden: needs --case DIR\n");
        return 2;
    }
    char def[2300], edef[2400];
    if (!out) {
        snprintf(def, sizeof def, "%s/expected.safetensors", dir);
        out = def;
    }
    if (!evp) { /* beside the golden (M3-VEC-11) */
        const char *slash = strrchr(out, '/');
        snprintf(edef, sizeof edef, "%.*s%s", slash ? (int)(slash - out + 1) : 0, out, CF_EVIDENCE_FILE);
        evp = edef;
    }
    m3_err e = {{0}};
    m3_progress pg;
    m3_progress_init_stderr(&pg, "m3-conform golden", quiet);
    m3_progress_task(&pg, "golden", M3_UNIT_ROWS, 0);
    int rc = cf_golden_write(dir, out, evp, verify, &pg, &e);
    m3_progress_end(&pg);
    if (rc) {
        fprintf(stderr, "m3-conform: %s\n", e.msg);
        return 2;
    }
    m3_progress_summary(&pg, out);
    printf("golden: %s\n", out);
    printf("tie evidence: %s\n", evp);
    return 0;
}

/* ---- synth ------------------------------------------------------------------------------ */
static int cmd_synth(int argc, char **argv)
{
    cf_synth_opts so;
    m3_err e = {{0}};
    int help = 0;
    if (cf_synth_parse_args(&so, argc, argv, &help, &e)) {
        fprintf(stderr, "m3-conform: %s\n", e.msg);
        cf_synth_usage(stderr);
        return 2;
    }
    if (help) {
        cf_synth_usage(stdout);
        return 0;
    }
    m3_progress pg;
    m3_progress_init_stderr(&pg, "m3-conform synth", so.quiet);
    int rc = cf_synth_write(&so, stdout, so.dry_run ? NULL : &pg, &e);
    m3_progress_end(&pg);
    if (rc) {
        fprintf(stderr, "m3-conform: %s\n", e.msg);
        return 2;
    }
    if (!so.dry_run)
        m3_progress_summary(&pg, so.out);
    return 0;
}

/* Print s with newlines, tabs, quotes and backslashes escaped. */
static void put_escaped(const char *s)
{
    for (; *s; s++) {
        if (*s == '\n')
            fputs("\\n", stdout);
        else if (*s == '\t')
            fputs("\\t", stdout);
        else if (*s == '"' || *s == '\\')
            printf("\\%c", *s);
        else
            putchar(*s);
    }
}

/* m3-conform chat-check (see the head comment). */
static int cmd_chat_check(int argc, char **argv)
{
    const char *model = NULL, *conv = NULL, *ids_arg = NULL, *thinking = NULL;
    int print_expected = 0;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        const char **dst = !strcmp(a, "--model") ? &model : !strcmp(a, "--conversation") ? &conv
                           : !strcmp(a, "--ids") ? &ids_arg : !strcmp(a, "--thinking") ? &thinking
                           : NULL;
        if (dst && i + 1 < argc) {
            *dst = argv[++i];
        } else if (!strcmp(a, "--print-expected")) {
            print_expected = 1;
        } else {
            fprintf(stderr, "m3-conform chat-check: %s '%s'\n",
                    dst ? "missing value for" : "unknown option", a);
            usage(stderr);
            return 2;
        }
    }
    if (!model || !conv || (!ids_arg && !print_expected)) {
        fprintf(stderr, "m3-conform chat-check: needs --model DIR, --conversation FILE and "
                        "--ids FILE|LIST (or --print-expected)\n");
        return 2;
    }
    m3_err e = {{0}};
    m3_tokenizer *tok;
    int32_t *ids = NULL;
    size_t n = 0;
    if (m3_tokenizer_open(&tok, model, &e) != 0) {
        fprintf(stderr, "m3-conform chat-check: %s\n", e.msg);
        return 2;
    }
    if (ids_arg && cf_chat_read_ids(ids_arg, &ids, &n, &e) != 0) {
        fprintf(stderr, "m3-conform chat-check: %s\n", e.msg);
        m3_tokenizer_free(tok);
        return 2;
    }
    cf_chat_diff d;
    if (cf_chat_check(tok, conv, thinking, ids, n, &d, &e) != 0) {
        fprintf(stderr, "m3-conform chat-check: %s\n", e.msg);
        free(ids);
        m3_tokenizer_free(tok);
        return 2;
    }
    int rc = 0;
    if (print_expected) {
        for (size_t i = 0; i < d.n_expected; i++)
            printf("%s%d", i ? "," : "", (int)d.expected[i]);
        printf("\n");
    }
    if (ids_arg) {
        printf("chat-check: %s: %zu expected ids, %zu given\n", conv, d.n_expected, d.n_got);
        if (d.equal) {
            printf("verdict: PASS (the ids are the spec's rendering, tokenized)\n");
        } else {
            printf("first difference at position %zu: expected %d \"", d.pos, (int)d.want);
            put_escaped(d.want >= 0 ? d.want_str : "(end of the prompt)");
            printf("\", got %d \"", (int)d.got);
            put_escaped(d.got >= 0 ? d.got_str : "(end of the ids)");
            printf("\"\n  before:   \"");
            put_escaped(d.ctx_before);
            printf("\"\n  expected: \"");
            put_escaped(d.ctx_expected);
            printf("\"\n  got:      \"");
            put_escaped(d.ctx_got);
            printf("\"\nverdict: FAIL\n");
            rc = 1;
        }
    }
    cf_chat_diff_free(&d);
    free(ids);
    m3_tokenizer_free(tok);
    return rc;
}

/* plot: the pictures of one dump (dump_plot.h); either picture is skipped,
 * with a note, when the dump has no layer of its kind. */
static int cmd_plot(const opts *o)
{
    if (!o->dump || !o->out || o->npaths) {
        fprintf(stderr, "m3-conform plot: needs --dump FILE and --out DIR (and nothing else)\n");
        return 2;
    }
    struct stat sb;
    if (stat(o->out, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        fprintf(stderr, "m3-conform plot: %s: not a directory\n", o->out);
        return 2;
    }
    cf_tset d = {0};
    m3_err e = {{0}};
    if (cf_tset_load(&d, o->dump, &e) != 0) {
        fprintf(stderr, "m3-conform plot: %s\n", e.msg);
        return 2;
    }
    const char *base = o->title ? o->title
                       : strrchr(o->dump, '/') ? strrchr(o->dump, '/') + 1 : o->dump;
    static const char *const files[2] = {"msa_selection.png", "moe_routing.png"};
    static const char *const need[2] = {"attn.block_indices", "moe.topk_index"};
    int rc = 0, drawn = 0;
    for (int k = 0; k < 2 && rc == 0; k++) {
        int have = 0;
        for (int i = 0; i < d.n && !have; i++) {
            const char *dot = strrchr(d.t[i].name, '.');
            have = strncmp(d.t[i].name, "layers.", 7) == 0 && dot &&
                   strlen(d.t[i].name) > strlen(need[k]) &&
                   strcmp(d.t[i].name + strlen(d.t[i].name) - strlen(need[k]), need[k]) == 0;
        }
        if (!have) {
            printf("%s: no layers.{i}.%s; %s not drawn\n", o->dump, need[k], files[k]);
            continue;
        }
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", o->out, files[k]);
        if ((k == 0 ? cf_plot_selection(&d, base, path, &e) : cf_plot_routing(&d, base, path, &e)) != 0) {
            fprintf(stderr, "m3-conform plot: %s\n", e.msg);
            rc = 2;
        } else {
            printf("%s\n", path);
            drawn++;
        }
    }
    if (rc == 0 && drawn == 0) {
        fprintf(stderr, "m3-conform plot: %s has neither block selections nor routing\n", o->dump);
        rc = 2;
    }
    cf_tset_free(&d);
    return rc;
}

int main(int argc, char **argv)
{
    opts o;
    if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
                      strcmp(argv[1], "help") == 0)) {
        usage(stdout);
        return 0;
    }
    if (argc >= 2 && (strcmp(argv[1], "version") == 0 || strcmp(argv[1], "--version") == 0)) {
        printf("m3-conform protocol %s\n", CF_PROTOCOL_VERSION);
        return 0;
    }
    if (argc >= 2 && strcmp(argv[1], "golden") == 0)
        return cmd_golden(argc - 2, argv + 2);
    if (argc >= 2 && strcmp(argv[1], "synth") == 0)
        return cmd_synth(argc - 2, argv + 2);
    if (argc >= 2 && strcmp(argv[1], "chat-check") == 0)
        return cmd_chat_check(argc, argv);
    if (parse_args(&o, argc, argv)) {
        usage(stderr);
        return 2;
    }
    if (strcmp(o.cmd, "plot") == 0)
        return cmd_plot(&o);
    if (strcmp(o.cmd, "check") && strcmp(o.cmd, "run") && strcmp(o.cmd, "rows") && strcmp(o.cmd, "merge")) {
        fprintf(stderr, "m3-conform: unknown command \"%s\"\n", o.cmd);
        usage(stderr);
        return 2;
    }
    if (o.help) {
        usage_cmd(stdout, o.cmd);
        return 0;
    }
    m3_err e = {{0}};
    if (o.caps_file && load_caps_file(o.caps_file, o.unsupported, sizeof o.unsupported, &e)) {
        fprintf(stderr, "m3-conform: %s\n", e.msg);
        return 2;
    }
    ctx c;
    memset(&c, 0, sizeof c);
    c.o = &o;
    m3_progress_init_stderr(&c.pg, "m3-conform", o.quiet);
    c.color = isatty(1) && !getenv("NO_COLOR");
    char tolp[2300];
    if (o.tolerances)
        snprintf(tolp, sizeof tolp, "%s", o.tolerances);
    else
        default_tolerances(tolp, sizeof tolp);
    if (cf_tol_load(&c.tol, tolp, &e)) {
        fprintf(stderr, "m3-conform: %s\n", e.msg);
        return 2;
    }
    if (o.profile && !cf_tol_profile(&c.tol, o.profile)) {
        fprintf(stderr, "m3-conform: %s has no profile \"%s\"\n", tolp, o.profile);
        cf_tol_free(&c.tol);
        return 2;
    }
    if (check_outputs(&o, tolp, &e)) {
        fprintf(stderr, "m3-conform: %s\n", e.msg);
        cf_tol_free(&c.tol);
        return 2;
    }
    m3_outfile jout; /* written to a temporary file, renamed over --json at the end */
    memset(&jout, 0, sizeof jout);
    if (o.json) {
        if (m3_out_open(&jout, o.json, &e)) {
            fprintf(stderr, "m3-conform: %s\n", e.msg);
            cf_tol_free(&c.tol);
            return 2;
        }
        c.jsonl = jout.f;
    }
    int rc = strcmp(o.cmd, "check") == 0   ? cmd_check(&c)
             : strcmp(o.cmd, "rows") == 0  ? cmd_rows(&c)
             : strcmp(o.cmd, "merge") == 0 ? cmd_merge(&c)
                                           : cmd_run(&c);
    {
        char sum[64];
        snprintf(sum, sizeof sum, "%s, exit %d", o.cmd, rc);
        m3_progress_summary(&c.pg, sum);
    }
    if (rc == 2 && c.nreps == 0) {
        /* bad input: CI still gets a record naming the problem */
        cf_report r;
        init_report(&r, NULL, "", o.profile, "input");
        snprintf(r.id, sizeof r.id, "%s", o.case_dir ? o.case_dir : o.npaths ? o.paths[0] : "m3-conform");
        snprintf(r.error, sizeof r.error, "bad input: %.1000s", c.fatal[0] ? c.fatal : "see stderr");
        r.result = CF_INTERNAL_ERROR;
        emit(&c, &r, 0, 0);
        keep(&c, &r);
    }
    if (o.json && m3_out_commit(&jout, &e)) {
        fprintf(stderr, "m3-conform: %s\n", e.msg);
        rc = 2;
    }
    if (o.junit && c.nreps && cf_write_junit(o.junit, c.suite_name[0] ? c.suite_name : "m3", c.reps, c.nreps, &e)) {
        fprintf(stderr, "m3-conform: %s\n", e.msg);
        rc = 2;
    }
    if (o.plot && c.nreps && cf_write_plot(o.plot, c.reps, c.nreps, &e)) {
        fprintf(stderr, "m3-conform: %s\n", e.msg);
        rc = 2;
    }
    for (int i = 0; i < c.nreps; i++)
        cf_report_free(&c.reps[i]);
    free(c.reps);
    cf_tol_free(&c.tol);
    return rc;
}
