/* test_safetensors.c — writer/reader round trip and every header validation
 * (M3-FMT-ST-*, M3-FMT-SHARD-1). */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/types.h>
#include <unistd.h>
#include <cmocka.h>

#include "safetensors.h"

static char g_dir[256];

static int setup(void **state)
{
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/m3-test-st-XXXXXX");
    return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

static const char *pth(char *buf, size_t n, const char *name)
{
    snprintf(buf, n, "%s/%s", g_dir, name);
    return buf;
}

/* Write 8-byte little-endian length hlen, then header text, then data bytes. */
static void write_raw(const char *path, uint64_t hlen, const char *hdr, size_t data_len)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    unsigned char b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)(hlen >> (8 * i));
    assert_int_equal(fwrite(b, 1, 8, f), 8);
    if (hdr)
        assert_int_equal(fwrite(hdr, 1, strlen(hdr), f), strlen(hdr));
    for (size_t i = 0; i < data_len; i++)
        fputc((int)(i & 0xff), f);
    fclose(f);
}

/* File with a correct length field for hdr. */
static void write_st(const char *path, const char *hdr, size_t data_len)
{
    write_raw(path, strlen(hdr), hdr, data_len);
}

/* Open must fail and the message must contain every given fragment. */
static void expect_fail(const char *path, const char *frag1, const char *frag2)
{
    m3_store *s = (m3_store *)0x1;
    m3_err e = {{0}};
    assert_int_equal(m3_store_open(&s, path, &e), -1);
    assert_null(s);
    if (!strstr(e.msg, frag1) || (frag2 && !strstr(e.msg, frag2)))
        fail_msg("message '%s' lacks '%s' / '%s'", e.msg, frag1, frag2 ? frag2 : "");
}

static void test_roundtrip(void **state)
{
    (void)state;
    char p[512];
    m3_err e = {{0}};
    m3_st_writer *w = m3_st_writer_new();
    assert_non_null(w);
    float a[6] = {1, 2, 3, 4, 5, 6.5f};
    uint16_t bf[4] = {0x3f80, 0x4000, 0xbf80, 0x0000};
    int32_t none[1] = {0};
    uint8_t scalar = 42;
    int64_t sa[2] = {2, 3}, sb[1] = {4}, sz[2] = {0, 5};
    float junk[6] = {9, 9, 9, 9, 9, 9};
    assert_int_equal(m3_st_writer_add(w, "zeta.a", M3_F32, 2, sa, junk, &e), 0);
    assert_int_equal(m3_st_writer_add(w, "zeta.a", M3_F32, 2, sa, a, &e), 0); /* replaces */
    assert_int_equal(m3_st_writer_add(w, "alpha.bf", M3_BF16, 1, sb, bf, &e), 0);
    assert_int_equal(m3_st_writer_add(w, "mid.empty", M3_I32, 2, sz, none, &e), 0);
    assert_int_equal(m3_st_writer_add(w, "scalar", M3_U8, 0, NULL, &scalar, &e), 0);
    assert_int_equal(m3_st_writer_meta(w, "format", "pt", &e), 0);
    assert_int_equal(m3_st_writer_meta(w, "note", "quote \" and \\ ok", &e), 0);
    assert_int_equal(m3_st_writer_add(w, "__metadata__", M3_U8, 0, NULL, &scalar, &e), -1);
    pth(p, sizeof p, "rt.safetensors");
    assert_int_equal(m3_st_writer_save(w, p, &e), 0);
    m3_st_writer_free(w);

    /* header padded so that data starts 8-byte aligned */
    FILE *f = fopen(p, "rb");
    unsigned char len8[8];
    assert_int_equal(fread(len8, 1, 8, f), 8);
    fclose(f);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = (n << 8) | len8[i];
    assert_int_equal((8 + n) % 8, 0);

    m3_store *s = NULL;
    assert_int_equal(m3_store_open(&s, p, &e), 0);
    assert_int_equal(m3_store_count(s), 4);
    const char *order[4] = {"alpha.bf", "mid.empty", "scalar", "zeta.a"};
    for (size_t i = 0; i < 4; i++)
        assert_string_equal(m3_store_at(s, i)->name, order[i]);
    assert_null(m3_store_at(s, 4));
    const m3_tensor *t = m3_store_get(s, "zeta.a");
    assert_non_null(t);
    assert_int_equal(t->dtype, M3_F32);
    assert_int_equal(t->ndim, 2);
    assert_int_equal(t->shape[0], 2);
    assert_int_equal(t->shape[1], 3);
    assert_int_equal(t->nbytes, 24);
    assert_memory_equal(t->data, a, sizeof a);
    assert_string_equal(t->file, p);
    t = m3_store_get(s, "alpha.bf");
    assert_int_equal(t->dtype, M3_BF16);
    assert_memory_equal(t->data, bf, sizeof bf);
    assert_true(m3_load_f32(t->data, t->dtype, 2) == -1.0f);
    t = m3_store_get(s, "mid.empty");
    assert_int_equal(m3_tensor_numel(t), 0);
    assert_int_equal(t->nbytes, 0);
    t = m3_store_get(s, "scalar");
    assert_int_equal(t->ndim, 0);
    assert_int_equal(m3_tensor_numel(t), 1);
    assert_int_equal(*(const uint8_t *)t->data, 42);
    assert_null(m3_store_get(s, "nope"));
    assert_null(m3_store_get(s, "__metadata__"));
    m3_store_close(s);
    m3_store_close(NULL);

    /* a directory holding model.safetensors opens the same file */
    char dir[512], cmd[1600];
    pth(dir, sizeof dir, "single");
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && cp '%s' '%s/model.safetensors'", dir, p, dir);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(m3_store_open(&s, dir, &e), 0);
    assert_int_equal(m3_store_count(s), 4);
    m3_store_close(s);
}

/* m3_st_writer_append: rows along axis 0, and along axis 1 of a [G, T, K]
 * tensor (a dump's block_indices), matching a one-shot tensor byte for byte. */
static void test_append(void **state)
{
    (void)state;
    char p[512];
    m3_err e = {{0}};
    m3_st_writer *w = m3_st_writer_new();
    assert_non_null(w);
    /* whole: [2, 5, 3] int32, value g*100 + t*10 + k; appended as t = 0..1, 2..4 */
    int32_t whole[2][5][3], p1[2][2][3], p2[2][3][3];
    for (int g = 0; g < 2; g++)
        for (int t = 0; t < 5; t++)
            for (int k = 0; k < 3; k++) {
                whole[g][t][k] = g * 100 + t * 10 + k;
                if (t < 2)
                    p1[g][t][k] = whole[g][t][k];
                else
                    p2[g][t - 2][k] = whole[g][t][k];
            }
    int64_t s1[3] = {2, 2, 3}, s2[3] = {2, 3, 3};
    assert_int_equal(m3_st_writer_append(w, "bi", M3_I32, 3, s1, p1, 1, &e), 0);
    assert_int_equal(m3_st_writer_append(w, "bi", M3_I32, 3, s2, p2, 1, &e), 0);
    float r1[2][4] = {{1, 2, 3, 4}, {5, 6, 7, 8}}, r2[1][4] = {{9, 10, 11, 12}};
    int64_t q1[2] = {2, 4}, q2[2] = {1, 4}, bad[2] = {1, 3};
    assert_int_equal(m3_st_writer_append(w, "x", M3_F32, 2, q1, r1, 0, &e), 0);
    assert_int_equal(m3_st_writer_append(w, "x", M3_F32, 2, q2, r2, 0, &e), 0);
    /* refused: another width, another dtype, an axis out of range; x unchanged */
    assert_int_equal(m3_st_writer_append(w, "x", M3_F32, 2, bad, r2, 0, &e), -1);
    assert_non_null(strstr(e.msg, "dimension 1 is 4"));
    assert_int_equal(m3_st_writer_append(w, "x", M3_I32, 2, q2, r2, 0, &e), -1);
    assert_non_null(strstr(e.msg, "tensor x"));
    assert_int_equal(m3_st_writer_append(w, "x", M3_F32, 2, q2, r2, 2, &e), -1);
    pth(p, sizeof p, "append.safetensors");
    assert_int_equal(m3_st_writer_save(w, p, &e), 0);
    m3_st_writer_free(w);
    m3_store *s = NULL;
    assert_int_equal(m3_store_open(&s, p, &e), 0);
    const m3_tensor *t = m3_store_get(s, "bi");
    assert_non_null(t);
    assert_int_equal(t->shape[0], 2);
    assert_int_equal(t->shape[1], 5);
    assert_int_equal(t->shape[2], 3);
    assert_memory_equal(t->data, whole, sizeof whole);
    t = m3_store_get(s, "x");
    assert_int_equal(t->shape[0], 3);
    const float want[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    assert_int_equal(t->nbytes, sizeof want);
    assert_memory_equal(t->data, want, sizeof want);
    m3_store_close(s);

    /* 300 one-row appends (the decode steps of a chunked dump): the growth path */
    w = m3_st_writer_new();
    assert_non_null(w);
    float rows[300][3];
    for (int r = 0; r < 300; r++) {
        for (int c = 0; c < 3; c++)
            rows[r][c] = (float)(r * 3 + c);
        int64_t one[2] = {1, 3};
        assert_int_equal(m3_st_writer_append(w, "l", M3_F32, 2, one, rows[r], 0, &e), 0);
    }
    assert_int_equal(m3_st_writer_save(w, p, &e), 0);
    m3_st_writer_free(w);
    assert_int_equal(m3_store_open(&s, p, &e), 0);
    t = m3_store_get(s, "l");
    assert_int_equal(t->shape[0], 300);
    assert_int_equal(t->nbytes, sizeof rows);
    assert_memory_equal(t->data, rows, sizeof rows);
    m3_store_close(s);
}

static void test_header_errors(void **state)
{
    (void)state;
    char p[512];
    /* truncated: fewer than 8 bytes */
    pth(p, sizeof p, "trunc.safetensors");
    FILE *f = fopen(p, "wb");
    fputs("abc", f);
    fclose(f);
    expect_fail(p, p, "file too small");

    /* header length beyond the file */
    pth(p, sizeof p, "long.safetensors");
    write_raw(p, 1000, "{}", 0);
    expect_fail(p, "header length beyond end of file", "1000");

    /* header length below 2 and above the cap */
    pth(p, sizeof p, "tiny.safetensors");
    write_raw(p, 1, "{", 0);
    expect_fail(p, "header length too small", NULL);
    pth(p, sizeof p, "cap.safetensors");
    write_raw(p, (uint64_t)M3_ST_MAX_HEADER + 1, "{}", 0);
    expect_fail(p, "over the cap", NULL);

    /* malformed JSON */
    pth(p, sizeof p, "bad.safetensors");
    write_st(p, "{\"a\": {\"dtype\": \"F32\", ", 0);
    expect_fail(p, p, "not valid JSON");

    /* not an object */
    pth(p, sizeof p, "arr.safetensors");
    write_st(p, "[1, 2]", 0);
    expect_fail(p, "not a JSON object", NULL);

    /* trailing junk after the object (spaces are fine, checked by the writer test) */
    pth(p, sizeof p, "trail.safetensors");
    write_st(p, "{} x", 0);
    expect_fail(p, "trailing bytes", NULL);

    /* unknown dtype */
    pth(p, sizeof p, "dtype.safetensors");
    write_st(p, "{\"w\":{\"dtype\":\"F8_E4M3\",\"shape\":[2],\"data_offsets\":[0,2]}}", 2);
    expect_fail(p, "tensor w: unknown dtype 'F8_E4M3'", p);

    /* shape x dtype disagrees with the byte range (a lying header) */
    pth(p, sizeof p, "lie.safetensors");
    write_st(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,12]}}", 16);
    expect_fail(p, "tensor w: byte range does not match shape x dtype", "(12 vs 16 bytes)");

    /* range outside the data section */
    pth(p, sizeof p, "out.safetensors");
    write_st(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[84,100]}}", 16);
    expect_fail(p, "tensor w: data_offsets end beyond the data section", "(100 vs 16 bytes)");

    /* begin > end */
    pth(p, sizeof p, "rev.safetensors");
    write_st(p, "{\"w\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[8,4]}}", 16);
    expect_fail(p, "begin > end", NULL);

    /* overlapping ranges */
    pth(p, sizeof p, "overlap.safetensors");
    write_st(p,
             "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
             "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[8,24]}}",
             24);
    expect_fail(p, "tensor b: byte range [8, 24) overlaps tensor a [0, 16)", NULL);

    /* an empty tensor inside another's range is not an overlap */
    pth(p, sizeof p, "emptyin.safetensors");
    write_st(p,
             "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
             "\"b\":{\"dtype\":\"F32\",\"shape\":[0,3],\"data_offsets\":[8,8]}}",
             16);
    m3_store *s = NULL;
    m3_err e = {{0}};
    assert_int_equal(m3_store_open(&s, p, &e), 0);
    m3_store_close(s);

    /* unknown key in an entry, missing key */
    pth(p, sizeof p, "key.safetensors");
    write_st(p, "{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],\"x\":1}}", 1);
    expect_fail(p, "tensor w: unexpected key 'x'", NULL);
    pth(p, sizeof p, "miss.safetensors");
    write_st(p, "{\"w\":{\"dtype\":\"U8\",\"shape\":[1]}}", 1);
    expect_fail(p, "tensor w: entry lacks 'data_offsets'", NULL);

    /* bad shapes */
    pth(p, sizeof p, "neg.safetensors");
    write_st(p, "{\"w\":{\"dtype\":\"U8\",\"shape\":[-1],\"data_offsets\":[0,1]}}", 1);
    expect_fail(p, "tensor w: shape[0] is not a non-negative integer (-1)", NULL);
    pth(p, sizeof p, "frac.safetensors");
    write_st(p, "{\"w\":{\"dtype\":\"U8\",\"shape\":[1.5],\"data_offsets\":[0,1]}}", 1);
    expect_fail(p, "shape[0] is not a non-negative integer", NULL);
    pth(p, sizeof p, "dims.safetensors");
    write_st(p, "{\"w\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}",
             1);
    expect_fail(p, "too many dimensions (9 vs max 8)", NULL);
    pth(p, sizeof p, "ovf.safetensors");
    write_st(p,
             "{\"w\":{\"dtype\":\"F64\",\"shape\":[4294967296,4294967296],"
             "\"data_offsets\":[0,8]}}",
             8);
    expect_fail(p, "overflows 64 bits", NULL);

    /* metadata must be an object of strings */
    pth(p, sizeof p, "meta.safetensors");
    write_st(p, "{\"__metadata__\":{\"a\":1}}", 0);
    expect_fail(p, "__metadata__ value of 'a' is not a string", NULL);

    /* duplicate tensor name in one header */
    pth(p, sizeof p, "dup.safetensors");
    write_st(p,
             "{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
             "\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}",
             2);
    expect_fail(p, "tensor w: appears twice", NULL);

    /* missing path, empty directory */
    pth(p, sizeof p, "does-not-exist.safetensors");
    expect_fail(p, "cannot open", NULL);
    char cmd[600];
    pth(p, sizeof p, "emptydir");
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", p);
    assert_int_equal(system(cmd), 0);
    expect_fail(p, "neither model.safetensors.index.json nor model.safetensors", NULL);
}

/* Two shards + index in directory `name`; `index` is the weight_map body. */
static void make_sharded(const char *name, const char *index_json)
{
    char dir[512], p[600], cmd[700];
    m3_err e = {{0}};
    pth(dir, sizeof dir, name);
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
    assert_int_equal(system(cmd), 0);
    float v[2] = {1, 2};
    int64_t sh[1] = {2};
    m3_st_writer *w = m3_st_writer_new();
    assert_int_equal(m3_st_writer_add(w, "a", M3_F32, 1, sh, v, &e), 0);
    assert_int_equal(m3_st_writer_add(w, "b", M3_F32, 1, sh, v, &e), 0);
    snprintf(p, sizeof p, "%s/s1.safetensors", dir);
    assert_int_equal(m3_st_writer_save(w, p, &e), 0);
    m3_st_writer_free(w);
    w = m3_st_writer_new();
    v[0] = 7;
    assert_int_equal(m3_st_writer_add(w, "c", M3_F32, 1, sh, v, &e), 0);
    snprintf(p, sizeof p, "%s/s2.safetensors", dir);
    assert_int_equal(m3_st_writer_save(w, p, &e), 0);
    m3_st_writer_free(w);
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    FILE *f = fopen(p, "w");
    fprintf(f, "{\"metadata\":{\"total_size\":24},\"weight_map\":{%s}}", index_json);
    fclose(f);
}

static void test_sharded(void **state)
{
    (void)state;
    char dir[512], p[600];
    m3_err e = {{0}};
    m3_store *s = NULL;
    make_sharded("ok", "\"a\":\"s1.safetensors\",\"b\":\"s1.safetensors\",\"c\":\"s2.safetensors\"");
    pth(dir, sizeof dir, "ok");
    assert_int_equal(m3_store_open(&s, dir, &e), 0);
    assert_int_equal(m3_store_count(s), 3);
    const m3_tensor *t = m3_store_get(s, "c");
    assert_non_null(t);
    assert_true(m3_load_f32(t->data, t->dtype, 0) == 7.0f);
    assert_non_null(strstr(t->file, "s2.safetensors"));
    assert_non_null(strstr(m3_store_get(s, "a")->file, "s1.safetensors"));
    m3_store_close(s);
    /* the index file itself can be given */
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    assert_int_equal(m3_store_open(&s, p, &e), 0);
    assert_int_equal(m3_store_count(s), 3);
    m3_store_close(s);

    /* missing shard */
    make_sharded("missing", "\"a\":\"s1.safetensors\",\"b\":\"s1.safetensors\","
                            "\"c\":\"s3.safetensors\"");
    pth(dir, sizeof dir, "missing");
    expect_fail(dir, "shard s3.safetensors is missing", NULL);

    /* tensor in a shard but not in the map */
    make_sharded("unlisted", "\"a\":\"s1.safetensors\",\"c\":\"s2.safetensors\"");
    pth(dir, sizeof dir, "unlisted");
    expect_fail(dir, "tensor b: not listed in", "s1.safetensors");

    /* map says the wrong shard */
    make_sharded("wrong", "\"a\":\"s1.safetensors\",\"b\":\"s2.safetensors\","
                          "\"c\":\"s2.safetensors\"");
    pth(dir, sizeof dir, "wrong");
    expect_fail(dir, "tensor b: listed in", "under shard s2.safetensors");

    /* map names a tensor its shard lacks */
    make_sharded("absent", "\"a\":\"s1.safetensors\",\"b\":\"s1.safetensors\","
                           "\"c\":\"s2.safetensors\",\"d\":\"s2.safetensors\"");
    pth(dir, sizeof dir, "absent");
    expect_fail(dir, "tensor d: listed for shard s2.safetensors but not found", NULL);

    /* path traversal and subdirectories in shard names */
    make_sharded("trav", "\"a\":\"../ok/s1.safetensors\",\"b\":\"s1.safetensors\","
                         "\"c\":\"s2.safetensors\"");
    pth(dir, sizeof dir, "trav");
    expect_fail(dir, "tensor a: shard '../ok/s1.safetensors' is not a plain file name", NULL);
    make_sharded("slash", "\"a\":\"/etc/passwd\",\"b\":\"s1.safetensors\","
                          "\"c\":\"s2.safetensors\"");
    pth(dir, sizeof dir, "slash");
    expect_fail(dir, "is not a plain file name", NULL);

    /* duplicate name in the map */
    make_sharded("dupmap", "\"a\":\"s1.safetensors\",\"b\":\"s1.safetensors\","
                           "\"c\":\"s2.safetensors\",\"c\":\"s2.safetensors\"");
    pth(dir, sizeof dir, "dupmap");
    expect_fail(dir, "tensor c: listed twice in weight_map", NULL);

    /* no weight_map */
    pth(dir, sizeof dir, "ok");
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    FILE *f = fopen(p, "w");
    fputs("{\"metadata\":{}}", f);
    fclose(f);
    expect_fail(dir, "no \"weight_map\" object", NULL);
}


/* Every truncation of a valid file fails cleanly; every single-byte corruption of
 * the header either fails with a message or yields tensors inside the file. */
static void test_truncation_and_corruption(void **state)
{
    (void)state;
    char p[512], q[512];
    m3_err e = {{0}};
    m3_st_writer *w = m3_st_writer_new();
    float a[5] = {1, 2, 3, 4, 5};
    int64_t s1[1] = {5}, s2[2] = {2, 2};
    assert_int_equal(m3_st_writer_add(w, "a", M3_F32, 1, s1, a, &e), 0);
    assert_int_equal(m3_st_writer_add(w, "b.c", M3_BF16, 2, s2, a, &e), 0);
    assert_int_equal(m3_st_writer_meta(w, "k", "v", &e), 0);
    pth(p, sizeof p, "good.safetensors");
    assert_int_equal(m3_st_writer_save(w, p, &e), 0);
    m3_st_writer_free(w);
    FILE *f = fopen(p, "rb");
    unsigned char buf[4096];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    assert_true(n > 8 && n < sizeof buf);
    pth(q, sizeof q, "cut.safetensors");
    int fd = open(q, O_RDWR | O_CREAT | O_TRUNC, 0644);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, buf, n, 0), (ssize_t)n);
    for (size_t len = n; len-- > 0;) { /* every proper prefix, shrinking in place */
        assert_int_equal(ftruncate(fd, (off_t)len), 0);
        m3_store *s = NULL;
        e.msg[0] = 0;
        assert_int_equal(m3_store_open(&s, q, &e), -1);
        assert_null(s);
        assert_non_null(strstr(e.msg, q));
    }
    assert_int_equal(pwrite(fd, buf, n, 0), (ssize_t)n);
    size_t hlen = buf[0] | (size_t)buf[1] << 8;
    static const unsigned char vals[] = {'}', '{', '"', ',', ':', '[', ']', '9', '-', 0xff, 0, ' '};
    for (size_t pos = 8; pos < 8 + hlen; pos++) {
        for (size_t v = 0; v < sizeof vals; v++) {
            unsigned char c = vals[v];
            assert_int_equal(pwrite(fd, &c, 1, (off_t)pos), 1);
            m3_store *s = NULL;
            e.msg[0] = 0;
            int rc = m3_store_open(&s, q, &e);
            if (rc != 0) {
                assert_null(s);
                assert_true(e.msg[0] != 0);
                continue;
            }
            for (size_t i = 0; i < m3_store_count(s); i++) {
                const m3_tensor *t = m3_store_at(s, i);
                assert_non_null(t->data);
                assert_true(t->nbytes <= n - 8 - hlen);
            }
            m3_store_close(s);
        }
        assert_int_equal(pwrite(fd, &buf[pos], 1, (off_t)pos), 1); /* restore */
    }
    close(fd);
}

/* m3_store_open_mem / m3_store_open_index_mem give what the path openers give
 * (same tensors, same error after the name), and the shard-count cap. */
static void test_mem_openers(void **state)
{
    (void)state;
    char dir[512], p[600];
    m3_err e = {{0}}, e2 = {{0}};
    m3_store *s = NULL, *sm = NULL;
    make_sharded("mem", "\"a\":\"s1.safetensors\",\"b\":\"s1.safetensors\","
                        "\"c\":\"s2.safetensors\"");
    pth(dir, sizeof dir, "mem");
    snprintf(p, sizeof p, "%s/s1.safetensors", dir);
    FILE *f = fopen(p, "rb");
    assert_non_null(f);
    unsigned char img[4096];
    size_t n = fread(img, 1, sizeof img, f);
    fclose(f);
    assert_true(n > 8 && n < sizeof img);
    assert_int_equal(m3_store_open(&s, p, &e), 0);
    assert_int_equal(m3_store_open_mem(&sm, img, n, "mem:s1", &e), 0);
    assert_int_equal(m3_store_count(sm), m3_store_count(s));
    for (size_t i = 0; i < m3_store_count(s); i++) {
        const m3_tensor *a = m3_store_at(s, i), *b = m3_store_at(sm, i);
        assert_string_equal(a->name, b->name);
        assert_int_equal(a->nbytes, b->nbytes);
        assert_memory_equal(a->data, b->data, a->nbytes);
        assert_true((const unsigned char *)b->data >= img &&
                    (const unsigned char *)b->data + b->nbytes <= img + n);
        assert_string_equal(b->file, "mem:s1");
    }
    m3_store_close(s);
    m3_store_close(sm);
    /* a truncated image fails like the truncated file, named by its name */
    char cut[600];
    pth(cut, sizeof cut, "cut.safetensors");
    f = fopen(cut, "wb");
    assert_int_equal(fwrite(img, 1, n - 1, f), n - 1);
    fclose(f);
    assert_int_equal(m3_store_open(&s, cut, &e), -1);
    assert_int_equal(m3_store_open_mem(&sm, img, n - 1, "mem:cut", &e2), -1);
    assert_null(sm);
    assert_non_null(strstr(e2.msg, "mem:cut: "));
    assert_string_equal(strchr(e.msg + strlen(cut), ' '), strchr(e2.msg, ' '));
    assert_int_equal(m3_store_open_mem(&sm, img, 3, "mem:tiny", &e2), -1);
    assert_non_null(strstr(e2.msg, "mem:tiny: file too small"));

    /* the index from memory, shards from dir */
    const char *idx = "{\"weight_map\":{\"a\":\"s1.safetensors\",\"b\":\"s1.safetensors\","
                      "\"c\":\"s2.safetensors\"}}";
    assert_int_equal(m3_store_open_index_mem(&sm, idx, strlen(idx), dir, "mem:index", &e), 0);
    assert_int_equal(m3_store_count(sm), 3);
    m3_store_close(sm);
    const char *bad = "{\"weight_map\":{\"a\":\"s1.safetensors\"}}";
    assert_int_equal(m3_store_open_index_mem(&sm, bad, strlen(bad), dir, "mem:index", &e), -1);
    assert_non_null(strstr(e.msg, "tensor b: not listed in mem:index"));

    /* more distinct shards than M3_ST_MAX_SHARDS: refused before any is opened */
    size_t cap = 64 + (size_t)(M3_ST_MAX_SHARDS + 1) * 32;
    char *big = malloc(cap);
    assert_non_null(big);
    size_t k = (size_t)snprintf(big, cap, "{\"weight_map\":{");
    for (int i = 0; i <= M3_ST_MAX_SHARDS; i++)
        k += (size_t)snprintf(big + k, cap - k, "%s\"t%d\":\"s%d.safetensors\"", i ? "," : "", i, i);
    k += (size_t)snprintf(big + k, cap - k, "}}");
    assert_true(k < cap);
    assert_int_equal(m3_store_open_index_mem(&sm, big, k, dir, "mem:many", &e), -1);
    assert_null(sm);
    char want[128];
    snprintf(want, sizeof want, "names %d shards (over the cap of %d, M3_ST_MAX_SHARDS)",
             M3_ST_MAX_SHARDS + 1, M3_ST_MAX_SHARDS);
    if (!strstr(e.msg, want) || !strstr(e.msg, "mem:many"))
        fail_msg("message '%s' lacks '%s'", e.msg, want);
    free(big);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_append),
        cmocka_unit_test(test_header_errors),
        cmocka_unit_test(test_sharded),
        cmocka_unit_test(test_truncation_and_corruption),
        cmocka_unit_test(test_mem_openers),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
