/* The native read loop of partition: HPLT JSON lines -> a run buffer's columns, one pass per line.
 *
 * `scan` takes the lines of one decompressed chunk and, for each line it accepts, appends the
 * text's UTF-8 bytes to the run's text buffer and the id, url and language to their lists: no
 * Python object is made for the text or for any field the pipeline does not keep (v4's xml and
 * md are whole pages). It accepts a line only when the strict path (records.strict_record:
 * orjson, then the field checks) would accept it with the same values, and it is conservative:
 * whatever it is not sure of (a number near double range, an escaped key, a repeated key that
 * matters, nesting past MAX_DEPTH, an id that is not printable ASCII, a blank line) it refuses,
 * and the caller decides that line with the strict path, which also names every bad line.
 * tests/unit/input/test_native_scan.py checks it against the strict path line by line.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define MAX_DEPTH 64
#define MAX_ID 4096      /* records.MAX_ID_CHARS; ids are printable ASCII here, so bytes = chars */
#define MAX_NUM_DIGITS 300 /* far from double range (~1.8e308): orjson refuses only infinity */

typedef struct {
    const unsigned char *p;
    const unsigned char *end;
} Cur;

/* ---------------------------------------------------------------- strings */

#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL
/* any byte of w < n (n <= 128), or any byte equal to c: the classic SWAR tests */
#define HAS_LESS(w, n) (((w) - ONES * (n)) & ~(w) & HIGHS)
#define HAS_BYTE(w, c) HAS_LESS((w) ^ (ONES * (c)), 1)

static int hexval(unsigned char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int hex4(const unsigned char *p) {
    int a = hexval(p[0]), b = hexval(p[1]), c = hexval(p[2]), d = hexval(p[3]);
    if ((a | b | c | d) < 0) return -1;
    return (a << 12) | (b << 8) | (c << 4) | d;
}

/* The length of the UTF-8 sequence at p (p < end, *p >= 0x80), checked as strictly as Python's
 * decoder (no overlongs, surrogates or code points past U+10FFFF); 0 if it is not one. */
static inline int utf8_seq(const unsigned char *p, const unsigned char *end) {
    unsigned char b = p[0];
    if (b >= 0xC2 && b <= 0xDF) return end - p >= 2 && (p[1] & 0xC0) == 0x80 ? 2 : 0;
    unsigned char lo = 0x80, hi = 0xBF;
    if (b >= 0xE0 && b <= 0xEF) {
        if (b == 0xE0) lo = 0xA0;
        else if (b == 0xED) hi = 0x9F;
        return end - p >= 3 && p[1] >= lo && p[1] <= hi && (p[2] & 0xC0) == 0x80 ? 3 : 0;
    }
    if (b >= 0xF0 && b <= 0xF4) {
        if (b == 0xF0) lo = 0x90;
        else if (b == 0xF4) hi = 0x8F;
        return end - p >= 4 && p[1] >= lo && p[1] <= hi && (p[2] & 0xC0) == 0x80 && (p[3] & 0xC0) == 0x80 ? 4 : 0;
    }
    return 0;
}

static inline unsigned char *put_utf8(unsigned char *o, uint32_t cp) {
    if (cp < 0x80) {
        *o++ = (unsigned char)cp;
    } else if (cp < 0x800) {
        *o++ = 0xC0 | (cp >> 6);
        *o++ = 0x80 | (cp & 0x3F);
    } else if (cp < 0x10000) {
        *o++ = 0xE0 | (cp >> 12);
        *o++ = 0x80 | ((cp >> 6) & 0x3F);
        *o++ = 0x80 | (cp & 0x3F);
    } else {
        *o++ = 0xF0 | (cp >> 18);
        *o++ = 0x80 | ((cp >> 12) & 0x3F);
        *o++ = 0x80 | ((cp >> 6) & 0x3F);
        *o++ = 0x80 | (cp & 0x3F);
    }
    return o;
}

/* One JSON string, its opening quote already consumed. With `out`, its value is written there
 * as UTF-8 (never longer than the JSON); *n gets the value's byte length. Refuses (returns 0)
 * what orjson refuses and lone surrogates; *escaped says whether it held a backslash.
 * Bytes that stand for themselves are copied in runs, at an escape and at the end. */
static int string(Cur *c, unsigned char *out, Py_ssize_t *n, int *escaped) {
    const unsigned char *p = c->p, *end = c->end, *run = p;
    unsigned char *o = out;
    *escaped = 0;
    for (;;) {
        while (end - p >= 8) {  /* plain ASCII, 8 bytes at a time; else to the first byte that is not */
            uint64_t w;
            memcpy(&w, p, 8);
            uint64_t special = (w & HIGHS) | HAS_LESS(w, 0x20) | HAS_BYTE(w, '"') | HAS_BYTE(w, '\\');
            if (special) {
                p += __builtin_ctzll(special) >> 3;  /* the lowest flag is exact: borrows only run upward */
                break;
            }
            p += 8;
        }
        if (p >= end) return 0;
        unsigned char b = *p;
        if (b >= 0x80) {
            do {
                int len = utf8_seq(p, end);
                if (!len) return 0;
                p += len;
            } while (p < end && *p >= 0x80);
            continue;
        }
        if (b == '"') {
            if (o) {
                memcpy(o, run, p - run);
                o += p - run;
                *n = o - out;
            }
            c->p = p + 1;
            return 1;
        }
        if (b < 0x20) return 0;
        if (b != '\\') {
            p++;
            continue;
        }
        *escaped = 1;
        if (o) {
            memcpy(o, run, p - run);
            o += p - run;
        }
        if (end - p < 2) return 0;
        unsigned char ch;
        switch (p[1]) {
            case '"': ch = '"'; break;
            case '\\': ch = '\\'; break;
            case '/': ch = '/'; break;
            case 'b': ch = '\b'; break;
            case 'f': ch = '\f'; break;
            case 'n': ch = '\n'; break;
            case 'r': ch = '\r'; break;
            case 't': ch = '\t'; break;
            case 'u': {
                if (end - p < 6) return 0;
                int u = hex4(p + 2);
                if (u < 0) return 0;
                p += 6;
                uint32_t cp = (uint32_t)u;
                if (cp >= 0xDC00 && cp <= 0xDFFF) return 0;        /* lone low surrogate */
                if (cp >= 0xD800 && cp <= 0xDBFF) {                 /* needs its low half */
                    if (end - p < 6 || p[0] != '\\' || p[1] != 'u') return 0;
                    int lo = hex4(p + 2);
                    if (lo < 0xDC00 || lo > 0xDFFF) return 0;
                    p += 6;
                    cp = 0x10000 + ((cp - 0xD800) << 10) + ((uint32_t)lo - 0xDC00);
                }
                if (o) o = put_utf8(o, cp);
                run = p;
                continue;
            }
            default: return 0;
        }
        if (o) *o++ = ch;
        p += 2;
        run = p;
    }
}

/* ---------------------------------------------------------------- values */

static inline void ws(Cur *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\n' || *c->p == '\r' || *c->p == '\t')) c->p++;
}

static int number(Cur *c) {
    const unsigned char *p = c->p, *end = c->end;
    if (p < end && *p == '-') p++;
    if (p >= end) return 0;
    long digits = 0;
    if (*p == '0') {
        p++;
        digits = 1;
    } else if (*p >= '1' && *p <= '9') {
        while (p < end && *p >= '0' && *p <= '9') { p++; digits++; }
    } else return 0;
    if (p < end && *p == '.') {
        p++;
        if (p >= end || *p < '0' || *p > '9') return 0;
        while (p < end && *p >= '0' && *p <= '9') p++;
    }
    long exp = 0;
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        int neg = 0;
        if (p < end && (*p == '+' || *p == '-')) neg = *p++ == '-';
        if (p >= end || *p < '0' || *p > '9') return 0;
        while (p < end && *p >= '0' && *p <= '9') {
            if (exp < 100000) exp = exp * 10 + (*p - '0');
            p++;
        }
        if (neg) exp = -exp;  /* underflow is 0.0 to orjson, never refused */
    }
    if (digits + exp > MAX_NUM_DIGITS) return 0;  /* might be infinity: the strict path decides */
    c->p = p;
    return 1;
}

static int value(Cur *c, int depth);

static int literal(Cur *c, const char *word, Py_ssize_t n) {
    if (c->end - c->p < n || memcmp(c->p, word, n) != 0) return 0;
    c->p += n;
    return 1;
}

/* The elements of an array from its first one on, and its `]` (a trailing comma is refused):
 * *count gets their number. */
static int elements(Cur *c, int depth, Py_ssize_t *count) {
    Py_ssize_t k = 0;
    for (;;) {
        if (!value(c, depth)) return 0;
        k++;
        ws(c);
        if (c->p >= c->end) return 0;
        unsigned char b = *c->p++;
        if (b == ']') break;
        if (b != ',') return 0;
        ws(c);
    }
    if (count) *count = k;
    return 1;
}

/* An array of any content, its `[` already consumed; *count gets its length. */
static int array(Cur *c, int depth, Py_ssize_t *count) {
    ws(c);
    if (c->p < c->end && *c->p == ']') {
        c->p++;
        if (count) *count = 0;
        return 1;
    }
    return elements(c, depth, count);
}

/* A member's `"key" :` (keys are checked like any string): *key and *len give its JSON bytes. */
static int member_key(Cur *c, const unsigned char **key, Py_ssize_t *len, int *esc) {
    Py_ssize_t n;
    if (c->p >= c->end || *c->p != '"') return 0;
    *key = ++c->p;
    if (!string(c, NULL, &n, esc)) return 0;
    *len = c->p - 1 - *key;
    ws(c);
    if (c->p >= c->end || *c->p != ':') return 0;
    c->p++;
    ws(c);
    return 1;
}

/* After a member's value: 1 when another member follows, 2 at the object's end, 0 otherwise. */
static int member_end(Cur *c) {
    ws(c);
    if (c->p >= c->end) return 0;
    unsigned char b = *c->p++;
    if (b == '}') return 2;
    if (b != ',') return 0;
    ws(c);
    return 1;
}

/* Just after `{`: true (and past it) when the object is empty. */
static int empty_object(Cur *c) {
    ws(c);
    if (c->p < c->end && *c->p == '}') {
        c->p++;
        return 1;
    }
    return 0;
}

static int object(Cur *c, int depth) {
    const unsigned char *key;
    Py_ssize_t len;
    int esc, more;
    if (empty_object(c)) return 1;
    do {
        if (!member_key(c, &key, &len, &esc) || !value(c, depth)) return 0;
    } while ((more = member_end(c)) == 1);
    return more == 2;
}

static int value(Cur *c, int depth) {
    if (c->p >= c->end) return 0;
    Py_ssize_t n;
    int esc;
    switch (*c->p) {
        case '"': c->p++; return string(c, NULL, &n, &esc);
        case '{': c->p++; return depth < MAX_DEPTH && object(c, depth + 1);
        case '[': c->p++; return depth < MAX_DEPTH && array(c, depth + 1, NULL);
        case 't': return literal(c, "true", 4);
        case 'f': return literal(c, "false", 5);
        case 'n': return literal(c, "null", 4);
        default: return number(c);
    }
}

/* Characters (code points) of valid UTF-8: its bytes that are not continuation bytes (10xxxxxx). */
static Py_ssize_t chars(const unsigned char *p, Py_ssize_t n) {
    Py_ssize_t cont = 0, i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        cont += (Py_ssize_t)((((w & ~(w << 1) & HIGHS) >> 7) * ONES) >> 56);  /* a byte sum, no popcnt needed */
    }
    for (; i < n; i++) cont += (p[i] & 0xC0) == 0x80;
    return n - cont;
}

/* ---------------------------------------------------------------- the record */

typedef struct {
    unsigned char *buf;  /* a string's value */
    Py_ssize_t len;
    int set;             /* 0: key absent or null; 1: a string; 2: another value */
} Slot;

/* A language list (`lang` of v3, `lang` of an openlid object): *slot gets its first element when
 * that is a non-empty string, set=2 otherwise (the strict path's "und"). */
static int lang_list(Cur *c, int depth, Slot *slot, unsigned char *scratch) {
    int esc;
    slot->set = 2;
    if (c->p >= c->end) return 0;
    if (*c->p != '[') return value(c, depth);
    c->p++;
    ws(c);
    if (c->p < c->end && *c->p == '"') {
        c->p++;
        if (!string(c, scratch, &slot->len, &esc)) return 0;
        slot->buf = scratch;
        if (slot->len > 0) slot->set = 1;
        ws(c);
        if (c->p >= c->end) return 0;
        unsigned char b = *c->p++;
        if (b == ']') return 1;
        if (b != ',') return 0;
        ws(c);
        return elements(c, depth + 1, NULL);  /* the rest, at least one more element */
    }
    return array(c, depth + 1, NULL);
}

/* An openlid object: its `lang` list's first element (keys with a backslash refused). */
static int lid_object(Cur *c, int depth, Slot *slot, unsigned char *scratch) {
    const unsigned char *key;
    Py_ssize_t len;
    int esc, more, seen = 0;
    slot->set = 2;  /* a dict without "lang": the strict path's "und" */
    if (empty_object(c)) return 1;
    do {
        if (!member_key(c, &key, &len, &esc) || esc) return 0;
        if (len == 4 && memcmp(key, "lang", 4) == 0) {
            if (seen++) return 0;  /* a repeated "lang": the strict path keeps the last */
            if (c->p < c->end && *c->p == 'n') {
                if (!literal(c, "null", 4)) return 0;
            } else if (!lang_list(c, depth, slot, scratch)) return 0;
        } else if (!value(c, depth)) return 0;
    } while ((more = member_end(c)) == 1);
    return more == 2;
}

enum { K_OTHER, K_ID, K_TEXT, K_U, K_PII, K_LID, K_LID_DASH, K_LANG };

static int key_of(const unsigned char *k, Py_ssize_t n, int v4) {
    switch (n) {
        case 1: return k[0] == 'u' ? K_U : K_OTHER;
        case 2: return memcmp(k, "id", 2) == 0 ? K_ID : K_OTHER;
        case 3: return memcmp(k, "pii", 3) == 0 ? K_PII : K_OTHER;
        case 4:
            if (memcmp(k, "text", 4) == 0) return K_TEXT;
            if (!v4 && memcmp(k, "lang", 4) == 0) return K_LANG;
            return K_OTHER;
        case 10:
            if (v4 && memcmp(k, "openlid_v3", 10) == 0) return K_LID;
            if (v4 && memcmp(k, "openlid-v3", 10) == 0) return K_LID_DASH;
            return K_OTHER;
        default: return K_OTHER;
    }
}

#define MAX_WANTED 64

/* The keys whose raw JSON values a caller keeps (--annotations), and where each record has them. */
typedef struct {
    Py_ssize_t n;
    const char *key[MAX_WANTED];
    Py_ssize_t len[MAX_WANTED];
    const unsigned char *start[MAX_WANTED];  /* per record: NULL when the key is absent */
    const unsigned char *stop[MAX_WANTED];
} Wanted;

typedef struct {
    Slot id, text, url, lid, lid_dash, lang;
    Py_ssize_t pii;
    Py_ssize_t text_chars;
} Rec;

static Py_ssize_t wanted_index(const Wanted *w, const unsigned char *k, Py_ssize_t n) {
    for (Py_ssize_t j = 0; j < w->n; j++)
        if (w->len[j] == n && memcmp(w->key[j], k, n) == 0) return j;
    return -1;
}

/* One line -> *r, its text written at `text_out`; 0 when refused. */
static int record(const unsigned char *line, Py_ssize_t size, int v4, unsigned char *text_out,
                  unsigned char *scratch, Rec *r, Wanted *w) {
    Cur c = {line, line + size};
    unsigned char *s_id = scratch, *s_url = scratch + size, *s_lang = scratch + 2 * size,
                  *s_lang2 = scratch + 3 * size;
    unsigned seen = 0;
    const unsigned char *key;
    Py_ssize_t len;
    int esc, more;
    memset(r, 0, sizeof *r);
    for (Py_ssize_t j = 0; j < w->n; j++) w->start[j] = NULL;
    ws(&c);
    if (c.p >= c.end || *c.p != '{') return 0;
    c.p++;
    if (empty_object(&c)) return 0;  /* no id: the strict path names it */
    do {
        if (!member_key(&c, &key, &len, &esc)) return 0;
        if (esc) return 0;  /* an escaped key might spell a field the pipeline keeps */
        int k = key_of(key, len, v4);
        if (k != K_OTHER) {
            if (seen & (1u << k)) return 0;  /* repeated: the strict path keeps the last */
            seen |= 1u << k;
        }
        if (c.p >= c.end) return 0;
        unsigned char b = *c.p;
        Py_ssize_t kept = w->n ? wanted_index(w, key, len) : -1;
        if (kept >= 0) {
            if (w->start[kept]) return 0;  /* repeated: the strict path keeps the last */
            w->start[kept] = c.p;
        }
        switch (k) {
            case K_ID:
            case K_TEXT:
            case K_U: {
                Slot *slot = k == K_ID ? &r->id : k == K_TEXT ? &r->text : &r->url;
                unsigned char *out = k == K_ID ? s_id : k == K_TEXT ? text_out : s_url;
                if (b != '"') return 0;  /* not a string: the strict path names it */
                c.p++;
                if (!string(&c, out, &slot->len, &esc)) return 0;
                slot->buf = out;
                slot->set = 1;
                break;
            }
            case K_PII:
                if (b == 'n') {
                    if (!literal(&c, "null", 4)) return 0;
                } else if (b == '[') {
                    c.p++;
                    if (!array(&c, 2, &r->pii)) return 0;
                } else return 0;  /* not a list: the strict path names it */
                break;
            case K_LID:
            case K_LID_DASH: {
                Slot *slot = k == K_LID ? &r->lid : &r->lid_dash;
                unsigned char *buf = k == K_LID ? s_lang : s_lang2;
                if (b == 'n') {
                    if (!literal(&c, "null", 4)) return 0;
                } else if (b == '{') {
                    c.p++;
                    if (!lid_object(&c, 2, slot, buf)) return 0;
                } else {
                    slot->set = 2;  /* not a dict: "und" */
                    if (!value(&c, 1)) return 0;
                }
                break;
            }
            case K_LANG:
                if (b == 'n') {
                    if (!literal(&c, "null", 4)) return 0;
                } else if (!lang_list(&c, 1, &r->lang, s_lang)) return 0;
                break;
            default:
                if (!value(&c, 1)) return 0;
        }
        if (kept >= 0) w->stop[kept] = c.p;
    } while ((more = member_end(&c)) == 1);
    if (more != 2) return 0;
    ws(&c);
    if (c.p != c.end) return 0;
    if (r->id.set != 1 || r->text.set != 1 || r->url.set != 1) return 0;
    if (r->id.len == 0 || r->id.len > MAX_ID || r->url.len == 0) return 0;
    for (Py_ssize_t i = 0; i < r->id.len; i++)
        if (s_id[i] < 0x20 || s_id[i] > 0x7E) return 0;  /* not printable ASCII: the strict path decides */
    r->text_chars = chars(text_out, r->text.len);
    return 1;
}

/* ---------------------------------------------------------------- scan */

typedef struct {
    PyObject *obj;
    unsigned char *bytes;
    Py_ssize_t len;
} LangCache;

static PyObject *lang_str(Rec *r, int v4, LangCache *cache, PyObject *und) {
    Slot *s = &r->lang;
    if (v4) s = r->lid.set ? &r->lid : &r->lid_dash;  /* openlid_v3, or openlid-v3 when it is absent or null */
    if (s->set != 1) {
        Py_INCREF(und);
        return und;
    }
    if (cache->obj && cache->len == s->len && memcmp(cache->bytes, s->buf, s->len) == 0) {
        Py_INCREF(cache->obj);
        return cache->obj;
    }
    PyObject *o = PyUnicode_DecodeUTF8((const char *)s->buf, s->len, "strict");
    if (!o) return NULL;
    if (s->len <= 64) {
        Py_XDECREF(cache->obj);
        cache->obj = o;
        Py_INCREF(o);
        memcpy(cache->bytes, s->buf, s->len);
        cache->len = s->len;
    }
    return o;
}

/* A record's kept values as one JSON array, in the order of the wanted keys (null for an absent one):
 * the line's own bytes, which the scan checked as orjson would, so orjson reads the values it reads in it. */
static PyObject *kept_json(const Wanted *w) {
    Py_ssize_t n = 1 + (w->n ? w->n - 1 : 0) + 1;
    for (Py_ssize_t j = 0; j < w->n; j++) n += w->start[j] ? w->stop[j] - w->start[j] : 4;
    PyObject *out = PyBytes_FromStringAndSize(NULL, n);
    if (!out) return NULL;
    char *o = PyBytes_AS_STRING(out);
    *o++ = '[';
    for (Py_ssize_t j = 0; j < w->n; j++) {
        if (j) *o++ = ',';
        if (w->start[j]) {
            memcpy(o, w->start[j], w->stop[j] - w->start[j]);
            o += w->stop[j] - w->start[j];
        } else {
            memcpy(o, "null", 4);
            o += 4;
        }
    }
    *o = ']';
    return out;
}

static int append_new(PyObject *list, PyObject *o) {
    if (!o) return -1;
    int rc = PyList_Append(list, o);
    Py_DECREF(o);
    return rc;
}

/* `wanted` (None, or a tuple of at most MAX_WANTED bytes keys) into *w; 0 with an exception when it is not. */
static int wanted_keys(PyObject *wanted, PyObject *kept, Wanted *w) {
    w->n = 0;
    if (wanted == Py_None) return 1;
    if (!PyTuple_Check(wanted) || PyTuple_GET_SIZE(wanted) > MAX_WANTED || !PyList_Check(kept)) {
        PyErr_SetString(PyExc_TypeError, "wanted must be a tuple of at most 64 bytes keys, kept a list");
        return 0;
    }
    for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(wanted); j++) {
        PyObject *k = PyTuple_GET_ITEM(wanted, j);
        if (!PyBytes_Check(k)) {
            PyErr_SetString(PyExc_TypeError, "wanted keys must be bytes");
            return 0;
        }
        w->key[j] = PyBytes_AS_STRING(k);
        w->len[j] = PyBytes_GET_SIZE(k);
    }
    w->n = PyTuple_GET_SIZE(wanted);
    return 1;
}

PyDoc_STRVAR(scan_doc,
"scan(lines, number, start, v4, texts, fill, budget, ids, urls, langs, meta[, wanted, kept]) -> (next, fill, refused)\n\n"
"Take lines[start:] while they are records the strict path would accept: each one's text goes to\n"
"texts[fill:], its id, url and language to the three lists, and (text end, line number, characters,\n"
"PII spans) as four int64 to meta (lines[0] is line `number` of its shard). Stops after the record that brings fill to budget, at the end,\n"
"or at a line it does not take (refused=True: lines[next] is for the strict path). On an error (no\n"
"memory, a view of texts that stops it growing) the lists may hold records taken before it: the\n"
"caller's task fails with it. With `wanted` (a tuple of at most 64 keys, as bytes), each record also appends\n"
"to `kept` its values of those keys as one JSON array, null for an absent key; a repeated wanted key is refused.");

static PyObject *scan(PyObject *self, PyObject *args) {
    PyObject *lines, *texts, *ids, *urls, *langs, *meta, *wanted = Py_None, *kept = Py_None;
    Py_ssize_t number, start, fill, budget;
    int v4;
    if (!PyArg_ParseTuple(args, "O!nnpO!nnO!O!O!O!|OO", &PyList_Type, &lines, &number, &start, &v4, &PyByteArray_Type,
                          &texts, &fill, &budget, &PyList_Type, &ids, &PyList_Type, &urls, &PyList_Type, &langs,
                          &PyByteArray_Type, &meta, &wanted, &kept))
        return NULL;
    Wanted w;
    if (!wanted_keys(wanted, kept, &w)) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(lines), orig_len = PyByteArray_GET_SIZE(texts);
    if (fill < 0 || fill > orig_len || start < 0) {
        PyErr_SetString(PyExc_ValueError, fill < 0 || fill > orig_len ? "fill is outside texts" : "start is negative");
        return NULL;
    }
    static PyObject *und = NULL;
    if (!und && !(und = PyUnicode_InternFromString("und"))) return NULL;
    unsigned char *scratch = NULL;
    Py_ssize_t scratch_size = 0;
    unsigned char cache_bytes[64];
    LangCache cache = {NULL, cache_bytes, 0};
    Py_ssize_t i = start;
    int refused = 0, failed = 0;
    for (; i < n; i++) {
        PyObject *item = PyList_GET_ITEM(lines, i);
        const unsigned char *line;
        Py_ssize_t size;
        if (PyBytes_Check(item)) {
            line = (const unsigned char *)PyBytes_AS_STRING(item);
            size = PyBytes_GET_SIZE(item);
        } else if (PyByteArray_Check(item)) {
            line = (const unsigned char *)PyByteArray_AS_STRING(item);
            size = PyByteArray_GET_SIZE(item);
        } else {
            refused = 1;
            break;
        }
        if (4 * size > scratch_size) {
            PyMem_Free(scratch);
            scratch_size = 4 * size + 256;
            if (!(scratch = PyMem_Malloc(scratch_size))) {
                PyErr_NoMemory();
                failed = 1;
                break;
            }
        }
        if (PyByteArray_GET_SIZE(texts) < fill + size && PyByteArray_Resize(texts, fill + size) < 0) {
            failed = 1;
            break;
        }
        Rec r;
        unsigned char *text_out = (unsigned char *)PyByteArray_AS_STRING(texts) + fill;
        if (!record(line, size, v4, text_out, scratch, &r, &w)) {
            refused = 1;
            break;
        }
        if (append_new(ids, PyUnicode_DecodeUTF8((const char *)r.id.buf, r.id.len, "strict")) < 0 ||
            append_new(urls, PyUnicode_DecodeUTF8((const char *)r.url.buf, r.url.len, "strict")) < 0 ||
            append_new(langs, lang_str(&r, v4, &cache, und)) < 0 || (w.n && append_new(kept, kept_json(&w)) < 0)) {
            failed = 1;
            break;
        }
        fill += r.text.len;
        int64_t m[4] = {(int64_t)fill, (int64_t)(number + i), (int64_t)r.text_chars, (int64_t)r.pii};
        Py_ssize_t at = PyByteArray_GET_SIZE(meta);
        if (PyByteArray_Resize(meta, at + (Py_ssize_t)sizeof m) < 0) {
            failed = 1;
            break;
        }
        memcpy(PyByteArray_AS_STRING(meta) + at, m, sizeof m);
        if (fill >= budget) {
            i++;
            break;
        }
    }
    PyMem_Free(scratch);
    Py_XDECREF(cache.obj);
    /* texts keeps its length as slice assignment would have left it: at least `fill` */
    Py_ssize_t keep = fill > orig_len ? fill : orig_len;
    if (PyByteArray_GET_SIZE(texts) != keep && PyByteArray_Resize(texts, keep) < 0) failed = 1;
    if (failed) return NULL;
    return Py_BuildValue("nnO", i, fill, refused ? Py_True : Py_False);
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS, scan_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_scan", "The native read loop of partition (see scan).", -1, methods, NULL, NULL, NULL, NULL,
};

#ifndef SOURCE_SHA256
#define SOURCE_SHA256 "unknown"
#endif

PyMODINIT_FUNC PyInit__scan(void) {
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddStringConstant(m, "SOURCE_SHA256", SOURCE_SHA256) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
