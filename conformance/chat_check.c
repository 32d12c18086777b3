/* chat_check.c — is a port's prompt the spec's rendering of a conversation?
 *
 * Spec: M3-CHAT-* (the rendering, ref/chat.c), M3-CHAT-FILE-1 (the
 * conversation file), M3-TOK-* (its tokenization with the model's
 * tokenizer.json, special-token strings matched as special tokens and no
 * post-processor: HF apply_chat_template(tokenize=True)), M3-CLI-TOKENS-1
 * (the port's ids as a list). The port's ids pass when they equal the
 * expected ids exactly; otherwise the first differing position is reported
 * with both ids, their token strings and the decoded text around it, which is
 * how an "M3 rendered as M2" prompt (docs/divergences.md) shows up: at the
 * first token of the system turn's text.
 */
#include "chat_check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conversation.h"
#include "fileio.h"
#include "tokens.h"

#define CONTEXT 12 /* ids of context each side of the first difference */

void cf_chat_diff_free(cf_chat_diff *d)
{
    free(d->rendered);
    free(d->expected);
    free(d->want_str);
    free(d->got_str);
    free(d->ctx_expected);
    free(d->ctx_got);
    free(d->ctx_before);
    memset(d, 0, sizeof *d);
}

/* Decoded text of ids[0..n) with special tokens kept ("" when n is 0). */
static char *decode(const m3_tokenizer *tok, const int32_t *ids, size_t n, m3_err *e)
{
    char *s = NULL;
    size_t len;
    if (n == 0) {
        s = calloc(1, 1);
        if (!s)
            m3_fail(e, "out of memory");
        return s;
    }
    if (m3_tokenizer_decode(tok, ids, n, 0, &s, &len, e) != 0)
        return NULL;
    return s;
}

int cf_chat_compare(const m3_tokenizer *tok, const char *rendered, const int32_t *got, size_t ngot,
                    cf_chat_diff *d, m3_err *e)
{
    memset(d, 0, sizeof *d);
    d->rendered = strdup(rendered);
    if (!d->rendered)
        return m3_fail(e, "out of memory");
    if (m3_tokenizer_encode(tok, rendered, strlen(rendered), 1, &d->expected, &d->n_expected, e) != 0)
        goto fail;
    d->n_got = ngot;
    const size_t V = m3_tokenizer_vocab_size(tok);
    size_t i = 0;
    while (i < d->n_expected && i < ngot && d->expected[i] == got[i])
        i++;
    d->equal = i == d->n_expected && i == ngot;
    if (d->equal)
        return 0;
    d->pos = i;
    d->want = i < d->n_expected ? d->expected[i] : -1;
    d->got = i < ngot ? got[i] : -1;
    /* a given id outside the vocabulary is itself the difference: shown, not decoded */
    for (size_t k = 0; k < ngot; k++)
        if (got[k] < 0 || (size_t)got[k] >= V) {
            if (k <= i) {
                d->pos = k;
                d->want = k < d->n_expected ? d->expected[k] : -1;
                d->got = got[k];
                i = k;
            }
            d->got_out_of_vocab = 1;
            break;
        }
    const size_t lo = i > CONTEXT ? i - CONTEXT : 0;
    size_t he = i + CONTEXT < d->n_expected ? i + CONTEXT : d->n_expected;
    size_t hg = i + CONTEXT < ngot ? i + CONTEXT : ngot;
    /* the last CONTEXT ids of the common prefix */
    if (!(d->ctx_before = decode(tok, d->expected + lo, i - lo, e)))
        goto fail;
    if (!(d->want_str = decode(tok, d->expected + i, d->want >= 0 ? 1 : 0, e)))
        goto fail;
    if (!(d->ctx_expected = decode(tok, d->expected + i, he > i ? he - i : 0, e)))
        goto fail;
    if (d->got_out_of_vocab) {
        d->got_str = strdup("(not in the vocabulary)");
        d->ctx_got = strdup("");
        if (!d->got_str || !d->ctx_got) {
            m3_fail(e, "out of memory");
            goto fail;
        }
    } else {
        if (!(d->got_str = decode(tok, got + i, d->got >= 0 ? 1 : 0, e)))
            goto fail;
        if (!(d->ctx_got = decode(tok, got + i, hg > i ? hg - i : 0, e)))
            goto fail;
    }
    return 0;
fail:
    cf_chat_diff_free(d);
    return -1;
}

int cf_chat_read_ids(const char *arg, int32_t **ids, size_t *n, m3_err *e)
{
    char *buf = NULL;
    size_t len = 0;
    const char *name = "--ids";
    FILE *f = fopen(arg, "rb");
    if (f) {
        fclose(f);
        if (m3_read_file(arg, 64u << 20, &buf, &len, e) != 0)
            return -1;
        name = arg;
    } else {
        buf = strdup(arg);
        if (!buf)
            return m3_fail(e, "out of memory");
        len = strlen(buf);
    }
    /* a JSON array "[1, 2, 3]" (as Python prints a list) reads as the list inside */
    char *s = buf;
    size_t l = len;
    while (l > 0 && (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r')) {
        s++;
        l--;
    }
    while (l > 0 && (s[l - 1] == ' ' || s[l - 1] == '\t' || s[l - 1] == '\n' || s[l - 1] == '\r'))
        l--;
    if (l >= 2 && s[0] == '[' && s[l - 1] == ']') {
        s++;
        l -= 2;
    }
    int rc = m3_parse_token_list(s, l, name, ids, n, e);
    free(buf);
    return rc;
}

int cf_chat_check(const m3_tokenizer *tok, const char *conversation, const char *thinking,
                  const int32_t *got, size_t ngot, cf_chat_diff *d, m3_err *e)
{
    m3_conversation *cv;
    memset(d, 0, sizeof *d);
    if (m3_conversation_load(conversation, &cv, e) != 0)
        return -1;
    m3_chat_conv c = *m3_conversation_chat(cv);
    if (thinking && m3_thinking_parse(thinking, &c.mode, e) != 0) {
        m3_conversation_free(cv);
        return m3_fail_prefix(e, "--thinking");
    }
    char *text;
    int rc = m3_chat_render(&c, &text, NULL, e);
    m3_conversation_free(cv);
    if (rc != 0)
        return m3_fail_prefix(e, "%s", conversation);
    rc = cf_chat_compare(tok, text, got, ngot, d, e);
    free(text);
    return rc;
}
