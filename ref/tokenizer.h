/* tokenizer.h — HF tokenizer.json byte-level BPE: encode text to ids, decode ids
 * to text, and decode token by token for streaming.
 *
 * Spec: M3-TOK-FILE (what of tokenizer.json / tokenizer_config.json is read and
 * what is rejected), M3-TOK-ADDED (added/special tokens, matched leftmost-longest
 * before pre-tokenisation, with single_word/lstrip/rstrip/normalized flags),
 * M3-TOK-PRETOK (Split / ByteLevel / Sequence pre-tokenizers; regex in
 * pretok_regex.h), M3-TOK-BPE (merges by rank, ignore_merges, byte_fallback,
 * unk), M3-TOK-DECODE (ByteLevel decoder, lossy UTF-8 like HF), M3-TOK-STREAM
 * (streamed text is only ever complete UTF-8), M3-TOK-UTF8 (invalid input bytes
 * become U+FFFD first, as Python's bytes.decode('utf-8', 'replace')).
 *
 * Encoding equals HF `tokenizers` Tokenizer.encode(text, add_special_tokens=False):
 * a post_processor is never applied (the chat renderer adds bos itself).
 * Normalizers other than none are rejected with an error (NFC is not implemented).
 */
#ifndef M3_TOKENIZER_H
#define M3_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

typedef struct m3_tokenizer m3_tokenizer;

/* Load path: a tokenizer.json file, or a directory holding tokenizer.json and
 * optionally tokenizer_config.json. The caller frees *out with m3_tokenizer_free. */
int m3_tokenizer_open(m3_tokenizer **out, const char *path, m3_err *e);
/* As m3_tokenizer_open for tokenizer.json text json[0..len) in memory (same
 * validation; no tokenizer_config.json; name is used in messages). */
int m3_tokenizer_open_mem(m3_tokenizer **out, const char *json, size_t len, const char *name,
                          m3_err *e);
/* Free a tokenizer; NULL is allowed. */
void m3_tokenizer_free(m3_tokenizer *t);

/* Encode text[0..len) (any bytes; invalid UTF-8 becomes U+FFFD). allow_special=0
 * encodes special added tokens as plain text (HF encode_special_tokens=True).
 * On success *ids is malloc'd (caller frees; may be NULL when *n == 0). */
int m3_tokenizer_encode(const m3_tokenizer *t, const char *text, size_t len, int allow_special,
                        int32_t **ids, size_t *n, m3_err *e);

/* Decode ids to UTF-8 text exactly as HF decode(ids, skip_special_tokens=skip_special)
 * (invalid byte sequences become U+FFFD). *out is malloc'd and NUL-terminated. */
int m3_tokenizer_decode(const m3_tokenizer *t, const int32_t *ids, size_t n, int skip_special,
                        char **out, size_t *out_len, m3_err *e);
/* The raw bytes token id decodes to (before UTF-8 repair); valid while t lives. */
int m3_tokenizer_token_bytes(const m3_tokenizer *t, int32_t id, const uint8_t **bytes,
                             size_t *len, m3_err *e);

/* Streaming decoder state; initialise with m3_decode_stream_init, release with
 * m3_decode_stream_free. Holds the bytes of a character split across tokens. */
typedef struct m3_decode_stream {
    uint8_t pending[8];
    size_t npending;
    char *buf; /* output of the last call (owned) */
    size_t cap;
    int skip_special;
} m3_decode_stream;

/* Start a stream; skip_special as in m3_tokenizer_decode. */
void m3_decode_stream_init(m3_decode_stream *s, int skip_special);
/* Free the stream's buffer (the struct itself belongs to the caller). */
void m3_decode_stream_free(m3_decode_stream *s);
/* Feed one id; text and len receive the newly complete UTF-8 (possibly empty),
 * valid until the next call on s. */
int m3_tokenizer_decode_stream(const m3_tokenizer *t, m3_decode_stream *s, int32_t id,
                               const char **text, size_t *len, m3_err *e);
/* End of stream: emit what is held (an incomplete character becomes U+FFFD). */
int m3_decode_stream_flush(m3_decode_stream *s, const char **text, size_t *len, m3_err *e);

/* Number of ids (largest id + 1, vocab and added tokens). */
size_t m3_tokenizer_vocab_size(const m3_tokenizer *t);
/* Id of a token by its exact content (added tokens first, then the vocab); -1 if none. */
int32_t m3_tokenizer_token_id(const m3_tokenizer *t, const char *content);
/* 1 if id is an added token marked special. */
int m3_tokenizer_is_special(const m3_tokenizer *t, int32_t id);
/* bos / eos ids from tokenizer_config.json (bos_token / eos_token); -1 when absent. */
int32_t m3_tokenizer_bos_id(const m3_tokenizer *t);
int32_t m3_tokenizer_eos_id(const m3_tokenizer *t);
/* 1 if tokenizer_config.json has a chat_template (m3 renders MiniMax chat in C: chat.h). */
int m3_tokenizer_has_chat_template(const m3_tokenizer *t);

#endif
