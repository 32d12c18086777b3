/* m3-gpu.cu — bin/m3-gpu: the M3 text forward on the GPU (HIP API; nvcc
 * through gpu/hip_compat.h) behind the command line of bin/m3-ref, with
 * m3-ref's dump names so that bin/m3-conform judges its dumps.
 *
 *   m3-gpu forward  --model DIR --tokens IDS [--tokens IDS]... [--teacher-forced GOLDEN]
 *                   (with m3-ref forward's --dtype, --dump, vision, --quiet and config options)
 *   m3-gpu vision-case --case DIR --dump OUT.safetensors
 *   m3-gpu generate (m3-ref generate's options; several --tokens / --prompt batch)
 * Exit status: 0 success, 1 model or run error, 2 bad command line.
 *
 * This file is the command line only: the options are parsed by
 * ref/cli_opts.h, the parser bin/m3-ref uses, and the commands run in
 * gpu/forward_run.h, gpu/generate_run.h and gpu/vision.h. Below them:
 * gpu/weight_upload.h (the device weights), gpu/batch_context.h (buffers
 * and paged caches), gpu/forward.h (the batched forward), gpu/drafter.h
 * (Eagle3), gpu/kernels/kernels.h (the launchers); every HIP call is
 * checked through gpu/hip_check.h into an m3_err.
 *
 * Spec: M3-MODEL-*, M3-DUMP-*, M3-NUM-MODE-1, M3-NUM-BF16-2, M3-MSA-CACHE-1,
 * M3-EAGLE-VERIFY-1/2 (in the files named above).
 * Known differences: in bf16 a batch of more than 8 rows takes the GEMM and
 * may differ from the single-prompt run by a bf16 step. forward takes
 * --chunks, --max-new-tokens and --stream-weights for one prompt. Not done:
 * chunked prefill in generate, batches with vision or --draft, graph capture
 * of decode. Checks: docs/performance.md.
 */
#include <stdio.h>
#include <string.h>

extern "C" {
#include "cli_opts.h"
#include "safetensors.h"
}

#include "forward_run.h"
#include "generate_run.h"
#include "hip_check.h"
#include "vision.h"

static const char *HELP_FORWARD =
    "usage: m3-gpu forward --model DIR --tokens IDS [--dtype fp32|bf16] [--dump OUT.safetensors]\n"
    "                      [--tokens IDS]... (a batch) | [--teacher-forced GOLDEN.safetensors]\n"
    "                      [--image FILE]... [--video F1,F2,... --fps R] [--pixels FILE]\n"
    "                      [--vision-joint] [--quiet] [--lenient-config]   (as bin/m3-ref "
    "forward)\n"
    "                      [--chunks N1,N2,...] [--max-new-tokens N] [--stream-weights]\n"
    "                      [--exact-kernels]\n"
    "forward: run the T token ids through the model on the GPU in one pass (positions\n"
    "0..T-1); print T and the top-5 of the last row; --dump writes the activations under the\n"
    "names of bin/m3-ref forward (spec/dump.md), to be judged by bin/m3-conform.\n"
    "--teacher-forced GOLDEN (one --tokens): layer l runs from GOLDEN's layers.{l}.input\n"
    "(layer 0: its embeddings when that is absent) instead of layer l-1's output (the final\n"
    "norm from the last layer's own output); GOLDEN: an m3-ref dump or a vector's\n"
    "expected.safetensors of the same ids. Each dumped layer then carries its own error only\n"
    "(judge with m3-conform check, plain or --teacher-forced).\n"
    "A batch: several --tokens run together: linear layers, norms and MoE over the rows of\n"
    "all prompts in one launch each, attention and the MSA indexer per prompt over its own\n"
    "cache region. forward prints one line per prompt ('seq S: T=...'; S from 0 in\n"
    "command-line order) and --dump OUT writes one file per prompt: OUT with .S inserted\n"
    "before a final .safetensors, else appended (out.safetensors -> out.0.safetensors,\n"
    "out.1.safetensors, ...). Each prompt's dump equals its run alone (fp32: bitwise).\n"
    "One prompt only: --chunks N1,N2,... prefills it in these pieces (summing to T), each\n"
    "continuing the KV and index-K caches, as a serving engine with chunked prefill or a\n"
    "reused prefix does; the dump holds the rows of all chunks in order. --max-new-tokens N\n"
    "continues greedily and prints the ids ('greedy: ...'); the dump gets greedy_tokens.\n"
    "--stream-weights (forward and generate): only two layers' weights are on the device at\n"
    "a time, each uploaded from the mapped checkpoint while the one before it computes (for\n"
    "models larger than device memory; bitwise equal to resident weights); forward then\n"
    "prints the prefill rate, the bytes streamed and the host-to-device bandwidth.\n"
    "--exact-kernels (forward and generate, bf16): the MSA prefill with p rounded as the\n"
    "reference does (two passes) and the indexer's scores bitwise as the reference's,\n"
    "instead of the defaults (one-pass p and tensor-core score sums, both within the bf16\n"
    "profile); for free-running comparisons with bin/m3-ref that a near tie cannot\n"
    "unsettle. fp32 mode always runs the exact kernels.\n";

static const char *HELP_VISION_CASE =
    "usage: m3-gpu vision-case --case DIR --dump OUT.safetensors   (vision component vectors)\n"
    "vision-case: run one vision component vector case (vectors/vision/: patch embedding,\n"
    "encoder layer, tower, projector) on the GPU and dump its outputs for m3-conform check.\n";

static const char *HELP_GENERATE =
    "usage: m3-gpu generate --model DIR ((--tokens IDS | --prompt TEXT)... | --conversation FILE)\n"
    "                       [--max-new-tokens N]\n"
    "                       [--greedy | --temperature T --top-p P --top-k K --seed S]\n"
    "                       [--image FILE]... [--video F1,F2,... --fps R] [--pixels FILE]\n"
    "                       [--vision-joint] [--stream-weights] [--exact-kernels]\n"
    "                       [--chat [--system TEXT] [--thinking adaptive|enabled|disabled]]\n"
    "                       [--print-ids] [--dtype fp32|bf16] [--quiet] [--lenient-config]\n"
    "                       [--draft DIR [--spec-tokens K]]\n"
    "generate: as bin/m3-ref generate (same options, defaults, eos and output): prefill on the\n"
    "GPU, then decode one token at a time over the device KV / index-K caches; the last\n"
    "logits row is copied to the host and chosen by the reference sampler (ref/sampling.h).\n"
    "--max-new-tokens defaults to 32; sampling defaults come from DIR/generation_config.json,\n"
    "else temperature 1.0, top_p 0.95, top_k 40; --temperature 0 is greedy; --print-ids\n"
    "prints only the generated ids, comma-separated. --chat renders every --prompt as the\n"
    "user turn of a conversation (--system, --thinking); --conversation FILE renders the\n"
    "conversation in FILE as the one prompt. Each option means what it means in\n"
    "'bin/m3-ref generate --help'; --stream-weights and --exact-kernels as in\n"
    "'bin/m3-gpu forward --help'.\n"
    "A batch: several --tokens and/or --prompt run together (linear layers, norms and MoE over\n"
    "the rows of all prompts, attention per prompt over its own cache region), decoding one\n"
    "token per unfinished prompt per step; one line per prompt, in order, when all are done.\n"
    "Each prompt's ids equal its run alone (fp32: bitwise). --image/--video/--pixels take a\n"
    "single prompt, not a batch.\n"
    "--draft DIR [--spec-tokens K] (one prompt, no vision input): Eagle3 speculative decoding\n"
    "as bin/m3-ref (the same loop, ref/speculative.c, with the target and the drafter on the\n"
    "GPU; drafter in fp32; greedy output identical to plain decoding; statistics line on\n"
    "stderr at the end).\n";

/* The usage of every command (m3-gpu --help). */
static void print_help(void)
{
    fputs(HELP_FORWARD, stdout);
    fputs(HELP_GENERATE, stdout);
    fputs(HELP_VISION_CASE, stdout);
    fputs("Exit status: 0 success, 1 model or run error, 2 bad command line. See the header of\n"
          "gpu/m3-gpu.cu for what is complete.\n", stdout);
}

/* Print "m3-gpu CMD: MSG" and the usage hint, as bin/m3-ref; returns the usage exit status. */
static int usage_err(const char *cmd, const char *msg)
{
    fprintf(stderr, "m3-gpu %s: %s\n(run 'm3-gpu %s --help' for usage)\n", cmd, msg, cmd);
    return M3G_EXIT_USAGE;
}

/* The vision request of o (its image paths stay o's). */
static m3g_vision_request vision_request(const m3_cli_opts *o)
{
    m3g_vision_request r;
    memset(&r, 0, sizeof r);
    r.image_paths = o->images;
    r.n_images = o->n_images;
    r.video_frames = o->video;
    r.fps = o->fps;
    r.pixels_path = o->pixels;
    r.joint = o->vision_joint;
    return r;
}

static int cmd_forward(int argc, char **argv)
{
    m3_cli_opts o;
    m3_err e = {{0}};
    if (m3_cli_parse(argc - 2, argv + 2,
                     M3_CLI_TOKENS | M3_CLI_BATCH | M3_CLI_TEACHER | M3_CLI_DUMP | M3_CLI_DTYPE |
                         M3_CLI_VISION | M3_CLI_CHUNKS | M3_CLI_STREAM | M3_CLI_CONTINUE |
                         M3_CLI_EXACT,
                     &o, &e) != 0)
        return usage_err("forward", e.msg);
    if (o.help) {
        fputs(HELP_FORWARD, stdout);
        return 0;
    }
    if (m3_cli_prompt_check(&o, &e) != 0)
        return usage_err("forward", e.msg);
    const int vis = m3_cli_vision_requested(&o);
    if (o.n_src == 0)
        return usage_err("forward", "--tokens IDS is required (comma-separated non-negative "
                                    "integers)");
    if ((o.n_src > 1 || o.teacher) && (vis || (o.teacher && o.n_src != 1)))
        return usage_err("forward", "a batch (several --tokens) or --teacher-forced takes no "
                                    "vision input, and --teacher-forced takes exactly one "
                                    "--tokens");
    if ((o.chunks || (o.have_max_new && o.max_new > 0)) && (o.n_src != 1 || o.teacher || vis))
        return usage_err("forward", "--chunks and --max-new-tokens take one --tokens, without "
                                    "--teacher-forced or vision input");
    const m3g_vision_request vreq = vision_request(&o);
    const fwd_opts x = {o.chunks, o.stream_weights, o.have_max_new ? (int)o.max_new : 0,
                        o.exact_kernels};
    return forward_run(o.model, o.src, o.n_src, m3_cli_bf16(&o), o.lenient, o.dump, o.teacher,
                       vis ? &vreq : NULL, o.quiet, &x);
}

static int cmd_generate(int argc, char **argv)
{
    m3_cli_opts o;
    m3_err e = {{0}};
    if (m3_cli_parse(argc - 2, argv + 2,
                     M3_CLI_TOKENS | M3_CLI_PROMPT | M3_CLI_BATCH | M3_CLI_DTYPE | M3_CLI_GEN |
                         M3_CLI_VISION | M3_CLI_STREAM | M3_CLI_CONVERSATION | M3_CLI_EXACT,
                     &o, &e) != 0)
        return usage_err("generate", e.msg);
    if (o.help) {
        fputs(HELP_GENERATE, stdout);
        return 0;
    }
    if (m3_cli_prompt_check(&o, &e) != 0)
        return usage_err("generate", e.msg);
    const int vis = m3_cli_vision_requested(&o);
    if (o.conversation && o.n_src > 0)
        return usage_err("generate", "--conversation FILE is the prompt: give it without --tokens "
                                     "or --prompt");
    if (o.n_src == 0 && !o.conversation)
        return usage_err("generate", "give --tokens IDS or --prompt TEXT (repeat them for a "
                                     "batch), or --conversation FILE");
    if (o.greedy && (o.have_temp || o.have_top_p || o.have_top_k || o.have_seed))
        return usage_err("generate", "--greedy cannot be combined with --temperature, --top-p, "
                                     "--top-k or --seed");
    if (vis && o.n_src > 1)
        return usage_err("generate", "--image, --video and --pixels take a single prompt (one "
                                     "--tokens or --prompt), not a batch");
    if (o.draft && o.n_src > 1)
        return usage_err("generate", "--draft (speculative decoding) takes a single prompt (one "
                                     "--tokens or --prompt), not a batch");
    const m3_prompt_opts po = m3_cli_prompt_opts(&o);
    const m3g_vision_request vreq = vision_request(&o);
    gen_opts go;
    memset(&go, 0, sizeof go);
    go.dir = o.model;
    go.stream = o.stream_weights;
    go.exact = o.exact_kernels;
    const char *conv_src[1] = {NULL}; /* the conversation: one text prompt, rendered from FILE */
    const int conv_text[1] = {1};
    go.srcs = o.conversation ? conv_src : o.src;
    go.is_text = o.conversation ? conv_text : o.src_text;
    go.n = o.conversation ? 1 : o.n_src;
    go.mode = m3_cli_bf16(&o);
    go.greedy_flag = o.greedy;
    go.print_ids = o.print_ids;
    go.lenient = o.lenient;
    go.quiet = o.quiet;
    go.have_temp = o.have_temp;
    go.have_top_p = o.have_top_p;
    go.have_top_k = o.have_top_k;
    go.have_seed = o.have_seed;
    go.temp = o.temperature;
    go.top_p = o.top_p;
    go.top_k = o.top_k;
    go.seed = o.seed;
    go.max_new = o.max_new;
    go.po = &po;
    go.vreq = vis ? &vreq : NULL;
    go.draft = o.draft;
    go.spec_k = o.spec_k;
    return generate_run(&go);
}

/* m3-gpu vision-case --case DIR --dump OUT: one vision component vector case
 * (gpu/vision.h m3g_vision_run_case) on the device, for bin/m3-conform check. */
static int cmd_vision_case(int argc, char **argv)
{
    m3_cli_opts o;
    m3_err e = {{0}};
    if (m3_cli_parse(argc - 2, argv + 2, M3_CLI_CASE | M3_CLI_DUMP, &o, &e) != 0)
        return usage_err("vision-case", e.msg);
    if (o.help) {
        fputs(HELP_VISION_CASE, stdout);
        return 0;
    }
    if (!o.case_dir || !o.dump)
        return usage_err("vision-case", "--case DIR and --dump OUT.safetensors are required");
    int rc = M3G_EXIT_RUN, mode = 0;
    hipStream_t st = NULL;
    m3_st_writer *w = m3_st_writer_new();
    if (!w)
        m3_fail(&e, "out of host memory");
    if (w && !M3G_HIP(&e, hipStreamCreate(&st)) &&
        m3g_vision_run_case(o.case_dir, st, w, &mode, &e) == 0 &&
        m3_st_writer_meta(w, "m3.dump_version", "1", &e) == 0 &&
        m3_st_writer_meta(w, "m3.mode", mode ? "bf16" : "fp32", &e) == 0 &&
        m3_st_writer_meta(w, "m3.producer", "m3-gpu vision-case (" M3_GPU_VENDOR ")", &e) == 0 &&
        m3_st_writer_save(w, o.dump, &e) == 0) {
        printf("vision-case %s: dump %s\n", o.case_dir, o.dump);
        rc = 0;
    } else {
        fprintf(stderr, "m3-gpu vision-case: %s\n", e.msg);
    }
    if (st)
        (void)hipStreamDestroy(st);
    m3_st_writer_free(w);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        print_help();
        return 0;
    }
    if (argc >= 2 && !strcmp(argv[1], "forward"))
        return cmd_forward(argc, argv);
    if (argc >= 2 && !strcmp(argv[1], "generate"))
        return cmd_generate(argc, argv);
    if (argc >= 2 && !strcmp(argv[1], "vision-case"))
        return cmd_vision_case(argc, argv);
    fprintf(stderr, "m3-gpu: the command must be forward, generate or vision-case (run 'm3-gpu "
                    "--help' for usage)\n");
    return M3G_EXIT_USAGE;
}
