/* conform.h — the m3 conformance kit (bin/m3-conform): shared types.
 *
 * Spec: M3-VEC-* (case directories, manifest), M3-TOL-* (tolerance profiles),
 * M3-DUMP-* (activation names compared), M3-MSA-SELECT-* and
 * M3-MOE-ROUTER-2 (discrete outputs compared as sets with a tie tolerance),
 * M3-TOL-7/8 (what depends on a tie-accepted row is excluded or reported as
 * TieDiverged, never as an independent failure).
 *
 * The kit owns all comparison: a port (or the reference) produces a dump of
 * named tensors, the kit loads it into a cf_tset, judges every tensor against
 * the golden set with the first matching tolerance rule, orders the records
 * in forward order and names the first divergence. Like the library, these
 * functions never print (report.c and main.c do) and return 0 / -1 with an
 * m3_err message.
 */
#ifndef M3_CONFORM_H
#define M3_CONFORM_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cJSON.h>

#include "err.h"
#include "model.h"
#include "numerics.h"
#include "safetensors.h"

#define CF_PROTOCOL_VERSION "1"
#define CF_KIT_VERSION "1.1"        /* slice results carry it; merge refuses others (M3-DUMP-12) */

/* ---- result codes (append-only, Khronos CTS style) ----------------------- */
typedef enum cf_result {
    CF_PASS = 0,
    CF_FAIL,
    CF_WARNING,        /* QualityWarning: within tolerance, above tolerance/10 */
    CF_NOT_SUPPORTED,  /* missing tensor of a capability the port declared absent */
    CF_INTERNAL_ERROR, /* bad vector or runner problem, not the port's fault */
    CF_TIE_DIVERGED,   /* inconclusive: differs only where an accepted tie reaches (M3-TOL-8) */
    CF_RESULT_LAST
} cf_result;

/* "Pass", "Fail", "QualityWarning", "NotSupported", "InternalError", "TieDiverged". */
const char *cf_result_name(cf_result r);
/* Severity rank for combining results:
 * Pass < NotSupported < Warning < TieDiverged < Fail < InternalError. */
int cf_result_rank(cf_result r);
/* The worse of a and b by cf_result_rank. */
cf_result cf_result_worst(cf_result a, cf_result b);
/* 1 when r satisfies the pass rule (Pass, Warning, NotSupported). */
int cf_result_conforms(cf_result r);

/* ---- in-memory tensor sets (tensors.c) ------------------------------------ */
typedef struct cf_tensor {
    char *name;
    int is_int;                 /* 1: integer data in i, else float data in f */
    int ndim;
    int64_t shape[M3_MAX_DIMS];
    size_t n;                   /* number of elements */
    float *f;                   /* [n] when !is_int */
    int32_t *i;                 /* [n] when is_int */
} cf_tensor;

typedef struct cf_tset {
    cf_tensor *t;
    int n, cap;
} cf_tset;

/* Load every tensor of a safetensors file (floats widened to fp32, integers
 * to int32; int64 values outside int32 are an error). */
int cf_tset_load(cf_tset *s, const char *path, m3_err *e);
/* Load a port's dump for judging against golden: one regular .safetensors
 * file (a directory or an index.json is refused), dtypes of the contract only
 * (F32, BF16, F16, I32, I64). Only tensors golden names, with golden's shape,
 * are widened into s (row subsets of M3-DUMP-10, NAME.rows / rows, with no more
 * elements than the golden); one with another shape goes into misshaped as shape only
 * (its data is never read); names outside the dump contract of a model case
 * are listed in unrec[cap] with the closest expected name; other names are
 * ignored unread. */
int cf_tset_load_dump(cf_tset *s, cf_tset *misshaped, const char *path, const cf_tset *golden,
                      char *unrec, size_t cap, m3_err *e);
/* The judging part of cf_tset_load_dump for an open store st (named path). */
int cf_tset_from_dump_store(cf_tset *s, cf_tset *misshaped, const m3_store *st, const char *path,
                            const cf_tset *golden, char *unrec, size_t cap, m3_err *e);
/* As cf_tset_load for the tensors whose name keep(name, arg) accepts. */
int cf_tset_load_select(cf_tset *s, const char *path, int (*keep)(const char *name, void *arg), void *arg,
                        m3_err *e);
/* Copy every tensor of an open store into s. */
int cf_tset_from_store(cf_tset *s, const m3_store *st, m3_err *e);
/* Save a writer to a private temporary file, load it into s, remove the file. */
int cf_tset_from_writer(cf_tset *s, const m3_st_writer *w, m3_err *e);
/* Add a copy of float data (replaces a tensor of the same name). */
int cf_tset_add_f(cf_tset *s, const char *name, int ndim, const int64_t *shape, const float *data,
                  m3_err *e);
/* Add a copy of int32 data (replaces a tensor of the same name). */
int cf_tset_add_i(cf_tset *s, const char *name, int ndim, const int64_t *shape,
                  const int32_t *data, m3_err *e);
/* Tensor by exact name, NULL if absent. */
const cf_tensor *cf_tset_get(const cf_tset *s, const char *name);
/* Append the tensors of src to dst along the row axis (axis 0; axis 1 for
 * names ending in "block_indices"/"block_scores"), creating them when absent. */
int cf_tset_append_rows(cf_tset *dst, const cf_tset *src, m3_err *e);
/* Free all tensors; s is left empty and reusable. */
void cf_tset_free(cf_tset *s);
/* Copy the string value of `key` in a safetensors file's __metadata__ into
 * out (empty when absent); -1 only when the header cannot be read. */
int cf_st_meta(const char *path, const char *key, char *out, size_t cap, m3_err *e);
/* The JSON header of the safetensors file path (a regular file, opened without
 * blocking) into *h (NUL-terminated, n bytes; the caller frees it). */
int cf_st_header(const char *path, char **h, size_t *n, m3_err *e);
/* As cf_st_meta for a safetensors file image data[0..size) in memory (named name). */
int cf_st_meta_mem(const void *data, size_t size, const char *name, const char *key, char *out,
                   size_t cap, m3_err *e);

/* ---- row subsets (rows.c, M3-DUMP-10/11) ---------------------------------- */
/* Row axis of a dump name: 1 for the [G, T, ...] block tensors, else 0. */
int cf_row_axis(const char *name);
/* 1 when the rows of tensor `name` are positions (not greedy_tokens, vision.*, row sets). */
int cf_has_rows(const char *name);
/* The row set of tensor `name` in s: "NAME.rows", else "rows", else NULL. */
const cf_tensor *cf_rows_of(const cf_tset *s, const char *name);
/* Check every row set of a dump read from path: int32 [n], strictly ascending,
 * inside [0, T) (T <= 0: unchecked), NAME.rows names a tensor of the dump, and
 * every row tensor has T rows or as many as its set. */
int cf_rows_validate(const cf_tset *s, const char *path, long T, m3_err *e);
/* 1 when t holds a proper subset of the T positions: its row count is set's length (and not T). */
int cf_tensor_subset(const cf_tensor *t, const cf_tensor *set, long T);
/* Add to dst a copy of g holding only the positions pos[0..n) along its row
 * axis; have: NULL when g holds every position, else g's own row set. */
int cf_tensor_take_rows(cf_tset *dst, const cf_tensor *g, const cf_tensor *have, const int32_t *pos, long n,
                        m3_err *e);
/* Mark in want[0..T) the positions named by a params.rows selector (M3-DUMP-11);
 * block: the index block size for "*blocks~D"; where names the case in messages. */
int cf_rows_select(const char *sel, long T, int block, const char *where, unsigned char *want, m3_err *e);

/* ---- metrics and set comparison (compare.c) ------------------------------- */
typedef struct cf_metrics {
    double nmse;       /* sum (out-ref)^2 / sum ref^2 over finite pairs (0/0 = 0) */
    double max_abs;    /* max |out - ref| */
    double max_rel;    /* max |out - ref| / max(|ref|, 1e-3 * max|ref|) */
    double cos;        /* cosine similarity (1 when both are all zero) */
    size_t n_nan;      /* NaN elements in out */
    size_t n_inf_bad;  /* Inf in out not matched (position and sign) by ref */
    size_t n_ref_nan;  /* NaN in the golden tensor (a bad vector) */
    long first_bad;    /* first index of a NaN / unmatched Inf, or of the max-abs error; -1 none */
    long worst[4];     /* up to 4 indices with the largest |out - ref| (-1 unused) */
} cf_metrics;

/* Compute the metrics of out against ref, both [n]. */
void cf_metrics_compute(cf_metrics *m, const float *out, const float *ref, size_t n);

typedef struct cf_setstat {
    long rows;         /* rows compared */
    long rows_equal;   /* identical sets */
    long rows_tie;     /* differing, accepted because the swapped candidates tie */
    long rows_bad;     /* differing beyond the tie tolerance, duplicates, bad ids */
    long first_bad;    /* first bad row, -1 none */
    char why[300];     /* description of the first bad row */
    long rows_masked;      /* rows the caller masked (not in equal/tie/bad) */
    long rows_masked_bad;  /* masked rows that differ beyond the tie tolerance */
    long first_masked_bad; /* first such row, -1 none */
    long first_tie;        /* first unmasked tie-accepted row, -1 none */
    char why_masked[300];  /* description of the first masked bad row */
} cf_setstat;

/* Compare rows of k ids as sets (-1 entries are padding and ignored).
 * scores: NULL, or [rows, ns] golden scores of every candidate (+inf for
 * forced candidates); a row whose sets differ is accepted only if every
 * candidate the golden chose and out dropped scores within
 * tie_tol * max|finite score of the row| of every candidate out chose instead.
 * Ids outside [0, ns) (when scores given), duplicates, a different count of
 * valid ids, or -inf candidates make the row bad. */
void cf_compare_sets(cf_setstat *st, const int32_t *out, const int32_t *ref, long rows, int k,
                     const float *scores, int ns, double tie_tol);
/* As cf_compare_sets; masked (NULL or [rows]): rows with masked[r] != 0 are
 * counted in rows_masked / rows_masked_bad instead of equal / tie / bad;
 * state (NULL or [rows]) receives 0 equal, 1 tie-accepted, 2 bad per row. */
void cf_compare_sets_masked(cf_setstat *st, const int32_t *out, const int32_t *ref, long rows, int k,
                            const float *scores, int ns, double tie_tol, const unsigned char *masked,
                            signed char *state);

/* ---- tolerance profiles (tolerances.c) ------------------------------------ */
typedef struct cf_rule {
    char *match;       /* glob over "<component>/<tensor>": '*' any run, '?' one char */
    double nmse, max_abs, max_rel, cos_min; /* < 0 (max_rel, cos_min) or NAN: unchecked */
    char *why;
} cf_rule;

typedef struct cf_profile {
    char *name;
    double tie_tolerance;
    cf_rule *rules;
    int nrules;
} cf_profile;

typedef struct cf_tolerances {
    cf_profile *p;
    int np;
    char path[1024];
} cf_tolerances;

/* Shell-glob match: '*' matches any run of characters (dots and '/' too),
 * '?' any one character, '\\' escapes; returns 1 on match. */
int cf_glob(const char *pattern, const char *s);
/* Load spec/tolerances.json (format in spec/); every rule needs match + nmse + max_abs. */
int cf_tol_load(cf_tolerances *t, const char *path, m3_err *e);
/* Parse tolerances from a JSON text; name is used in messages. */
int cf_tol_parse(cf_tolerances *t, const char *json, size_t len, const char *name, m3_err *e);
/* Free everything cf_tol_load allocated. */
void cf_tol_free(cf_tolerances *t);
/* The profile called name, NULL if none. */
const cf_profile *cf_tol_profile(const cf_tolerances *t, const char *name);
/* The first rule of p whose glob matches key, NULL if none. */
const cf_rule *cf_tol_match(const cf_profile *p, const char *key);

/* ---- cases, manifests, mutants (case.c) ----------------------------------- */
#define CF_MAX_CHUNKS 256

typedef struct cf_case {
    char dir[2048];
    char id[256];
    char description[512];
    char component[64];   /* rmsnorm rope attention msa_select msa_attention router swiglu mlp moe model */
    m3_mode mode;
    char profile[64];     /* tolerance profile name (case.json "profile") */
    cJSON *root;          /* owned parse of case.json */
    const cJSON *params;  /* object inside root (never NULL after load) */
    int chunks[CF_MAX_CHUNKS];
    int nchunks;
    int max_new_tokens;
} cf_case;

/* Load and validate dir/case.json; verify_hashes: check files{} sha256 sums. */
int cf_case_load(cf_case *c, const char *dir, int verify_hashes, m3_err *e);
/* Parse a case.json text (validation only; dir is used for paths and messages). */
int cf_case_parse(cf_case *c, const char *json, size_t len, const char *dir, m3_err *e);
/* Free the parse tree. */
void cf_case_free(cf_case *c);
/* Numeric param `key` (a JSON number or a string strtod accepts, e.g. a hex
 * float); returns 0 and sets *v, or -1 naming the case and key. */
int cf_case_num(const cf_case *c, const char *key, double *v, m3_err *e);
/* As cf_case_num with a default when the key is absent. */
int cf_case_num_or(const cf_case *c, const char *key, double dflt, double *v, m3_err *e);
/* Lower-case hex sha256 of a file into hex[65]. */
int cf_sha256_file(const char *path, char hex[65], m3_err *e);
/* sha256 of parts[0..n) (lens[k] bytes each), each followed by one zero byte, into hex[65]. */
void cf_sha256_parts(const void *const *parts, const size_t *lens, int n, char hex[65]);

typedef struct cf_manifest {
    char path[2048];
    char root[2048];     /* directory holding the manifest */
    char suite[128];
    char version[64];
    char **cases;        /* absolute-ish dirs: root/<entry> */
    int ncases;
    char **mutants;      /* mutant dirs (manifest "mutants" or root/mutants/<*>) */
    int nmutants;
    int nskipped;        /* "big" cases listed but not generated here */
} cf_manifest;

#define CF_MANIFEST_MAX_BYTES (16u << 20) /* manifest.json size cap */

/* Load a manifest; entries must be relative, without "..", and exist. */
int cf_manifest_load(cf_manifest *m, const char *path, m3_err *e);
/* As cf_manifest_load for manifest text txt[0..len) already read from path
 * (entries resolve against path's directory). */
int cf_manifest_parse(cf_manifest *m, const char *txt, size_t len, const char *path, m3_err *e);
/* Free a manifest. */
void cf_manifest_free(cf_manifest *m);

typedef struct cf_mutant {
    char dir[2048];
    char id[256];
    char description[512];
    char case_dir[2048];    /* the case whose golden the dump is judged against */
    char dump[2048];        /* the mutant's dump file */
    char profile[64];       /* profile to judge with ("" = the case's) */
    int expect_pass;        /* 1: must conform (faithful bf16); 0: must fail */
    int expect_layer;       /* first divergent layer, -1 = none / not a layer tensor */
    char expect_tensor[128];    /* first divergent tensor name ("" = unchecked) */
    char expect_component[64];  /* first divergent component ("" = unchecked) */
} cf_mutant;

/* Load dir/mutant.json; paths in it are relative to suite_root (the manifest dir). */
int cf_mutant_load(cf_mutant *mu, const char *dir, const char *suite_root, m3_err *e);
/* Check the sha256 sums listed in the mutant's mutant.json "files". */
int cf_mutant_verify(const cf_mutant *mu, m3_err *e);

/* ---- running the reference (runner_ref.c) --------------------------------- */
/* Compute the expected outputs of a component case (names of the component
 * contract) from dir/inputs.safetensors into out. */
int cf_ref_component(const cf_case *c, cf_tset *out, m3_err *e);
/* Run a model case: prefill of input_ids (in params.chunks pieces when
 * chunked != 0 and chunks are given), the dump of every activation, then
 * params.max_new_tokens greedy tokens as "greedy_tokens". pg: NULL, or a
 * meter whose current task gets the total and one count per row per layer. */
int cf_ref_model(const cf_case *c, const m3_model *m, const cf_tset *inputs, int chunked,
                 cf_tset *out, m3_progress *pg, m3_err *e);
/* As cf_ref_model; ev (NULL: none) also receives "greedy_logits" [N, V]: row j
 * holds the logits greedy step j took its argmax of (the tie evidence of M3-TOL-4). */
int cf_ref_model_ev(const cf_case *c, const m3_model *m, const cf_tset *inputs, int chunked,
                    cf_tset *out, cf_tset *ev, m3_progress *pg, m3_err *e);
/* Teacher-forced: layer `layer` alone from x [T, H] (the residual entering
 * it) on a fresh state; its activations go into out. */
int cf_ref_layer(const m3_model *m, m3_mode mode, int layer, const float *x, int T, cf_tset *out,
                 m3_err *e);
/* cf_ref_layer, reporting to pg (NULL: none) one count per row. */
int cf_ref_layer_progress(const m3_model *m, m3_mode mode, int layer, const float *x, int T,
                          cf_tset *out, m3_progress *pg, m3_err *e);
/* Final norm and logits from the last layer's output x [T, H] into out. */
int cf_ref_head(const m3_model *m, m3_mode mode, const float *x, int T, cf_tset *out, m3_err *e);
/* As cf_ref_head, with logits only at the positions pos[0..n) (pos NULL: all T),
 * then also "logits.rows" = pos (M3-DUMP-10). */
int cf_ref_head_rows(const m3_model *m, m3_mode mode, const float *x, int T, const int32_t *pos, int n,
                     cf_tset *out, m3_err *e);
/* Teacher-forced run of every layer: layer i starts from feed's
 * "layers.{i}.input"; then the head from feed's last "layers.{L-1}.output".
 * The per-layer activations, final_norm and logits go into out. pg as for
 * cf_ref_model. */
int cf_ref_teacher_forced(const m3_model *m, m3_mode mode, const cf_tset *feed, cf_tset *out,
                          m3_progress *pg, m3_err *e);
/* Golden block scores [G, T, NB] of a sparse layer from its attn_norm [T, H]
 * (index projections, norms, RoPE, scores; raw, before forcing). */
int cf_ref_block_scores(const m3_model *m, m3_mode mode, int layer, const float *attn_norm, int T,
                        float **bs_out, int *nb_out, m3_err *e);

/* ---- dump names (names.c, M3-DUMP-3/7/10, M3-VEC-11) ------------------------ */
/* How a golden tensor is judged: one judging function per kind (judge.c). */
typedef enum cf_kind {
    CF_KIND_FLOAT = 0, /* float activations: metrics against a tolerance rule (M3-TOL-1..6) */
    CF_KIND_BLOCKS,    /* block_indices: sets per (head, row); ties on the block scores (M3-MSA-SELECT-*) */
    CF_KIND_EXPERTS,   /* topk_index: sets per row; ties on the biased router scores (M3-MOE-ROUTER-2) */
    CF_KIND_WEIGHTS,   /* topk_weight: float metrics in the port's own expert order (M3-DUMP-7) */
    CF_KIND_GREEDY,    /* greedy_tokens: exact; a first differing step judged on the golden logits (M3-TOL-4) */
    CF_KIND_EXACT,     /* other integer tensors: element by element */
    CF_KIND_SKIP       /* row sets (M3-DUMP-10) and aux.* tensors of a golden: never judged themselves */
} cf_kind;

/* What a record's comparison reports (the JSON "kind" of a slice, M3-DUMP-12). */
typedef enum cf_cmp {
    CF_CMP_METRICS = 0, /* float metrics */
    CF_CMP_SET = 1,     /* rows compared as sets */
    CF_CMP_EXACT = 2    /* integers compared element by element */
} cf_cmp;

/* Where a dump name lives. */
typedef enum cf_scope {
    CF_SCOPE_TOP,          /* the whole name (embeddings, logits, vision.patch_embed, ...) */
    CF_SCOPE_LAYER,        /* after "layers.{i}." */
    CF_SCOPE_VISION_LAYER, /* after "vision.layers.{j}." */
    CF_SCOPE_COMPONENT     /* the whole name, in a component case */
} cf_scope;

/* One entry of the table of dump names: everything the kit knows about a name. */
typedef struct cf_name {
    const char *leaf;       /* the name (TOP, COMPONENT) or its part after the layer prefix */
    cf_scope scope;
    cf_kind kind;
    const char *component;  /* localisation label ("msa-select", "moe-router", ...) */
    int order;              /* forward-order rank: TOP absolute, LAYER / VISION_LAYER within the
                             * layer, COMPONENT within the case's contract */
    const char *capability; /* the capability a port may declare absent (M3-DUMP-6), NULL: core */
    int row_axis;           /* axis of the token rows: 1 for [G, T, ...] block tensors, else 0 */
    int dump;               /* 1: a name of the model dump contract (M3-DUMP-3) */
    int tie_dependent;      /* component cases: depends on a tie of the case (M3-TOL-8 (a)) */
} cf_name;

/* The table entry of tensor name t in a model case (component_case 0) or a
 * component case (1), NULL when the table has none; *layer (may be NULL)
 * receives i for "layers.{i}." / j for "vision.layers.{j}." names, else -1. */
const cf_name *cf_name_find(const char *t, int component_case, int *layer);
/* The judging kind of a golden tensor t (is_int: it holds integers) in a
 * model or component case: the table's, by its last name part for names
 * outside the table; integers are compared exactly where metrics would be. */
cf_kind cf_name_kind(const char *t, int component_case, int is_int);
/* M3-TOL-8 (a): whether tensor t (layer, forward rank order) depends on a tie
 * of its own layer (model) or case (component). */
int cf_tie_dependent(const char *t, int component_case, int layer, int order);
/* 1 when t is a name of the model dump contract (M3-DUMP-3) for L layers. */
int cf_dump_contract_name(const char *t, int L);
/* The comparison a record of kind k reports. */
cf_cmp cf_kind_cmp(cf_kind k);
/* The whole table of dump names (*n entries), in forward order within each scope. */
const cf_name *cf_name_table(int *n);
/* The per-layer leaves of the model dump contract in forward order (M3-DUMP-3):
 * *n receives their count; entries are cf_name of scope CF_SCOPE_LAYER. */
const cf_name *cf_name_layer_leaves(int *n);

/* ---- tie evidence of a golden (evidence.c, M3-VEC-11) --------------------- */
#define CF_EVIDENCE_FILE "evidence.safetensors"
#define CF_EVIDENCE_VERSION "1"
#define CF_EVIDENCE_MAX_BYTES (4ull << 30) /* size cap of an evidence file */

/* Compute the tie evidence of a model golden from the reference: the raw
 * block scores of every sparse layer from the golden's attn_norm, and the
 * router correction bias of every MoE layer (zeros where the config uses
 * none), into ev. Greedy logits come from cf_ref_model. */
int cf_evidence_model(const m3_model *m, m3_mode mode, const cf_tset *golden, cf_tset *ev, m3_err *e);
/* Move the "aux.NAME" tensors of a component case's computed outputs into ev as NAME. */
int cf_evidence_from_component(cf_tset *out, cf_tset *ev, m3_err *e);
/* Write ev to path (through a temporary file and a rename), with metadata
 * m3.evidence_version and m3.golden_sha256 (the sha256 of golden_path). */
int cf_evidence_write(const cf_tset *ev, const char *path, const char *golden_path, m3_err *e);
/* Load the evidence file path of the golden golden (read from golden_path):
 * F32 tensors of the evidence names only, shaped after the golden, with every
 * tensor the golden's discrete tensors need; verify: its m3.golden_sha256
 * must be golden_path's sha256. Errors name path and the problem. */
int cf_evidence_load(cf_tset *ev, const char *path, const cf_tset *golden, const char *golden_path, int verify,
                     m3_err *e);
/* As cf_evidence_load for an evidence file image data[0..size) (named path);
 * golden_sha: the golden's sha256 to compare (NULL: unchecked). */
int cf_evidence_parse(cf_tset *ev, const void *data, size_t size, const char *path, const cf_tset *golden,
                      const char *golden_sha, m3_err *e);

/* ---- judging and localisation (judge.c, localise.c) ----------------------- */
typedef struct cf_record {
    char tensor[160];
    char key[224];          /* "<component>/<tensor>" used for rule matching */
    char component[48];     /* localisation component (norm, attention, msa-select, ...) */
    int layer;              /* -1 when not a layer tensor */
    int order;              /* forward-order rank */
    cf_cmp kind;            /* the comparison reported: metrics, sets or exact */
    int no_evidence;        /* 1: a differing choice could not be judged as a tie: the
                               golden carries no tie evidence (M3-VEC-11) */
    cf_result result;
    int downstream;         /* after the first failure in forward order */
    int have_metrics;
    cf_metrics m;
    float worst_out[4], worst_ref[4]; /* values at m.worst[] */
    const cf_rule *rule;    /* matched rule, NULL for discrete tensors */
    cf_setstat set;
    char msg[512];
    char not_judged[24];    /* NotSupported: the capability declared absent ("internals", ...),
                               or "embeddings" (absent, = layers.0.input) */
    /* M3-TOL-8: rows that depend on a tie-accepted row of an earlier record */
    long excluded_rows;     /* rows left out of the judgement (M3-TOL-8 (a)) */
    long excl_tie_row;      /* token row of the first tie behind them, -1 none */
    char excl_tie[160];     /* the discrete tensor holding that tie */
    long reached_rows;      /* TieDiverged: rows a tie reaches (M3-TOL-8 (b)), 0 otherwise */
    long reach_tie_row;     /* token row of the first tie behind them, -1 none */
    char reach_tie[160];    /* the discrete tensor holding that tie */
    long tie_row;           /* discrete records: first token row accepted as a tie and
                               starting a dependence (not itself reached), -1 none */
    long tie_head;          /* its index head for block_indices, else -1 */
} cf_record;

typedef struct cf_report {
    char id[300];
    char component[64];
    char profile[64];
    char target[64];        /* "ref", "dump", "mutant" */
    cf_record *rec;
    int nrec, cap;
    cf_result result;
    int first_fail;         /* index into rec of the first divergence, -1 none */
    int first_diverged;     /* first TieDiverged record (M3-TOL-8), -1 none */
    int first_tie;          /* first record with a tie starting a dependence, -1 none */
    long rows_excluded;     /* rows left out under M3-TOL-8 (a), summed over records */
    int tensors_excluded;   /* records with such rows */
    int ndiverged;          /* TieDiverged records */
    char error[1024];       /* set for InternalError / bad input of the whole case */
    char unrecognised[1024]; /* dump names the case does not know, with the closest expected */
    double seconds;
    int teacher_forced;
    long rows_total;        /* positions of the forward (T); 0 unknown */
    long rows_judged;       /* positions some judged tensor covers (M3-DUMP-10 row subsets) */
    char rows_note[160];    /* e.g. the case's row selector */
    char evidence[2100];    /* where the golden's tie evidence came from; "" none (M3-VEC-11) */
} cf_report;

/* Everything judging needs besides the two tensor sets. */
typedef struct cf_judge_ctx {
    const cf_case *c;
    const cf_profile *profile;
    const m3_model *model;     /* model cases: the config (MoE layers, forced blocks); may be NULL */
    const cf_tset *evidence;   /* the golden's tie evidence (M3-VEC-11); NULL: it carries none */
    const char *unsupported;   /* comma-separated capabilities the port declared absent */
    int teacher_forced;
    const unsigned char *want; /* NULL, or [want_T]: positions the case wants (params.rows, M3-DUMP-11) */
    long want_T;
    const char *want_sel;      /* the selector text, for messages */
    const cf_tset *misshaped;  /* dump tensors refused for their shape (shape only); may be NULL */
    const char *bad_feed;      /* teacher-forced: the dump's own layer input holding NaN/Inf, or NULL */
    const unsigned char *want_logits; /* NULL, or [want_T]: params.logits_rows, for logits */
    const char *want_logits_sel;
    const char *evidence_from; /* where evidence came from, for messages and the JSON; may be NULL */
} cf_judge_ctx;

/* Judge every golden tensor against out, appending records to r, then
 * localise (cf_localise). Returns -1 only for allocation failure. */
int cf_judge(cf_report *r, const cf_judge_ctx *ctx, const cf_tset *out, const cf_tset *golden,
             m3_err *e);
/* The capability a tensor belongs to (eagle3, block_indices, router, greedy,
 * vision) or NULL if it is core. */
const char *cf_capability_of(const char *tensor);
/* 1 when tensor is a per-layer internal (layers.{i}.<sub>, sub other than
 * input and output): capability "internals" (M3-DUMP-6). */
int cf_is_internal(const char *tensor);
/* Component label, layer and forward-order rank of a dump tensor name. */
void cf_classify(const char *tensor, const char *case_component, int is_moe_layer,
                 char *component, size_t cap, int *layer, int *order);
/* Sort records in forward order, find the first failure, mark the rest
 * downstream, find the first tie and TieDiverged record, set r->result. */
void cf_localise(cf_report *r);
/* Append an empty record to r; returns NULL on allocation failure. */
cf_record *cf_report_add(cf_report *r);
/* Free the records of r. */
void cf_report_free(cf_report *r);

/* ---- teacher-forced slices and merging (slice.c, M3-DUMP-12) --------------------------- */
#define CF_SLICE_FORMAT "m3-conform-slice-1"
#define CF_SLICE_MAX_BYTES (256u << 20)
#define CF_MAX_JOBS 1024

typedef struct cf_slice {
    char path[2048];        /* where it was read from (messages) */
    char kit[32];
    char identity[72];      /* case identity: sha256 of config.json, the dump's header, mode */
    char case_id[300];
    char profile[64];
    char mode[16];
    int from, to, L;        /* layers from..to of L */
    int head;               /* 1: final_norm and logits judged here */
    cf_report rep;          /* its records */
} cf_slice;

/* Parse a --layers value "A-B" or "A" for a model of L layers (0 <= A <= B < L). */
int cf_parse_layers(const char *text, int L, int *a, int *b, m3_err *e);
/* Parse a --jobs value: 1..CF_MAX_JOBS worker processes. */
int cf_parse_jobs(const char *text, int *n, m3_err *e);
/* Write the slice result of report r (sl gives identity, layers, profile) to
 * path through a temporary file and a rename. */
int cf_slice_write(const char *path, const cf_slice *sl, const cf_report *r, m3_err *e);
/* Parse a slice result text (named name); rules are re-found in tol's profile. */
int cf_slice_parse(cf_slice *sl, const char *json, size_t len, const char *name, const cf_tolerances *tol,
                   m3_err *e);
/* cf_slice_parse of the file at path. */
int cf_slice_load(cf_slice *sl, const char *path, const cf_tolerances *tol, m3_err *e);
/* Free a slice's records. */
void cf_slice_free(cf_slice *sl);
/* One teacher-forced report from slices sl[0..n): same case identity, kit,
 * profile and L; layer ranges disjoint and covering 0..L-1; one head. */
int cf_slice_merge(cf_report *out, const cf_slice *sl, int n, m3_err *e);

/* ---- teacher forcing on a checkpoint (checkpoint.c, M3-DUMP-12) ------------------------- */
typedef struct cf_tf_opts {
    const m3_model *model;       /* the checkpoint (weights mmap'd) */
    const cf_case *c;            /* a case, or one made up for the checkpoint */
    const cf_profile *profile;
    const cf_tolerances *tol;    /* to read worker results back */
    m3_mode mode;                /* the golden's numeric mode */
    const char *dump;            /* the port's dump file */
    const char *config_path;     /* config.json, part of the case identity */
    const char *unsupported;     /* capabilities declared absent besides the dump's m3.unsupported */
    int from, to;                /* layers to judge (-1: all); the head when to is the last */
    int jobs;                    /* worker processes (1: in this process) */
    int timing;                  /* 1: each layer's and the head's time on stderr */
    m3_progress *pg;             /* NULL, or the meter of the layers' progress: redrawn by this
                                  * process with one job; each worker of several prints plain
                                  * lines of its own ("worker w/N") */
} cf_tf_opts;

/* Judge layers from..to of the dump teacher-forced (each from its own
 * layers.{i}.input) and, when the slice ends at the last layer, the head,
 * in o->jobs worker processes; the records go into r, the slice's identity
 * (for cf_slice_write) into sl. */
int cf_tf_check(const cf_tf_opts *o, cf_report *r, cf_slice *sl, m3_err *e);
/* The case identity of a teacher-forced judgement: sha256 of config.json,
 * the dump's safetensors header, the mode and T, into hex[65]. */
int cf_tf_identity(const char *config_path, const char *dump, const char *mode, long T, char hex[65], m3_err *e);

/* ---- output (report.c) ---------------------------------------------------- */
/* Print the per-tensor table and the verdict line for one case. verbose 0
 * prints only failing/warning rows and the verdict. */
void cf_print_report(FILE *f, const cf_report *r, int verbose, int color);
/* One JSON object per record, plus one case summary line. */
void cf_write_jsonl(FILE *f, const cf_report *r, const char *suite);
/* JUnit XML with one <testcase> per case report. */
int cf_write_junit(const char *path, const char *suite, const cf_report *reps, int n, m3_err *e);
/* PNG heat-map of log10 error per layer (columns) per tensor type (rows),
 * one panel per report. */
int cf_write_plot(const char *path, const cf_report *reps, int n, m3_err *e);

#endif
