/* WebDataset tar reader over libarchive, and the pure key/extension and label helpers. */
#include "wds.h"

#include "dscache_base.h"

#include <archive.h>
#include <archive_entry.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int dsc_wds_split(const char *path, size_t *key_len, const char **ext) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    const char *dot = strchr(base, '.');
    if (dot == NULL || dot == base || dot[1] == '\0')
        return DSC_EINVAL;
    size_t base_len = strlen(base);
    /* WebDataset's tar iterator drops top-level "__meta__" files */
    if (base == path && base_len >= 4 && base[0] == '_' && base[1] == '_' &&
        base[base_len - 1] == '_' && base[base_len - 2] == '_')
        return DSC_EINVAL;
    *key_len = (size_t)(dot - path);
    *ext = dot + 1;
    return 0;
}

int dsc_wds_parse_int(const uint8_t *data, size_t len, int64_t *out) {
    size_t i = 0;
    while (i < len && isspace(data[i]))
        i++;
    int negative = 0;
    if (i < len && (data[i] == '-' || data[i] == '+'))
        negative = data[i++] == '-';
    size_t digits = 0;
    uint64_t v = 0;
    for (; i < len && data[i] >= '0' && data[i] <= '9'; i++, digits++) {
        unsigned d = (unsigned)(data[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return DSC_EINVAL;
        v = v * 10 + d;
    }
    while (i < len && isspace(data[i]))
        i++;
    if (digits == 0 || i != len)
        return DSC_EINVAL;
    if (negative ? v > (uint64_t)INT64_MAX + 1 : v > (uint64_t)INT64_MAX)
        return DSC_EINVAL;
    *out = negative ? (int64_t)(0 - v) : (int64_t)v;
    return 0;
}

typedef struct member_slot {
    size_t ext_off;  /* into names */
    size_t data_off; /* into data */
    uint64_t size, held;
} member_slot_t;

struct dsc_wds_reader {
    struct archive *archive;
    uint64_t prefix_limit;
    uint64_t sample_limit;
    uint64_t sample_bytes; /* the sample's files so far, as declared (or counted) */
    char too_large[DSC_WDS_MAX_NAME + 256];
    uint8_t *scratch; /* 64 KiB: file data counted but not held */
    int error;        /* sticky */
    char message[512];
    /* the sample being built */
    char key[DSC_WDS_MAX_NAME + 1];
    member_slot_t slots[DSC_WDS_MAX_MEMBERS];
    dsc_wds_member_t members[DSC_WDS_MAX_MEMBERS];
    uint32_t count;
    char names[DSC_WDS_MAX_MEMBERS * 64];
    size_t names_used;
    uint8_t *data;
    size_t data_used, data_cap;
    dsc_wds_sample_t sample;
    uint64_t ordinal;
    /* a header read whose key starts the next sample */
    int pending;
    char pending_path[DSC_WDS_MAX_NAME + 1];
    uint64_t pending_size;
    int pending_known;
    uint64_t bytes, skipped_files;
    int at_end;
};

static int set_error(dsc_wds_reader_t *r, int rc, const char *what) {
    r->error = rc;
    snprintf(r->message, sizeof r->message, "%s", what);
    return rc;
}

static int archive_failure(dsc_wds_reader_t *r, const char *during) {
    const char *msg = archive_error_string(r->archive);
    int rc = DSC_EIO;
    if (msg != NULL && (strstr(msg, "runcated") != NULL || strstr(msg, "premature") != NULL))
        rc = DSC_ETRUNCATED;
    else if (msg != NULL && (strstr(msg, "header") != NULL || strstr(msg, "checksum") != NULL))
        rc = DSC_EBADHEADER;
    r->error = rc;
    snprintf(r->message, sizeof r->message, "%s: %s", during, msg ? msg : "libarchive error");
    return rc;
}

static dsc_wds_reader_t *reader_new(uint64_t prefix_limit) {
    dsc_wds_reader_t *r = calloc(1, sizeof *r);
    if (r == NULL)
        return NULL;
    r->prefix_limit = prefix_limit;
    r->sample_limit = DSC_WDS_DEFAULT_SAMPLE_LIMIT;
    r->archive = archive_read_new();
    if (r->archive == NULL) {
        free(r);
        return NULL;
    }
    archive_read_support_filter_all(r->archive);
    archive_read_support_format_tar(r->archive);
    return r;
}

int dsc_wds_reader_open_file(const char *path, uint64_t prefix_limit, dsc_wds_reader_t **out) {
    *out = reader_new(prefix_limit);
    if (*out == NULL)
        return DSC_ENOMEM;
    if (archive_read_open_filename((*out)->archive, path, 1 << 16) != ARCHIVE_OK)
        return archive_failure(*out, "open") == DSC_ETRUNCATED ? DSC_ETRUNCATED : DSC_EIO;
    return 0;
}

int dsc_wds_reader_open_memory(const void *buf, size_t len, uint64_t prefix_limit,
                               dsc_wds_reader_t **out) {
    *out = reader_new(prefix_limit);
    if (*out == NULL)
        return DSC_ENOMEM;
    if (archive_read_open_memory((*out)->archive, buf, len) != ARCHIVE_OK)
        return archive_failure(*out, "open");
    return 0;
}

void dsc_wds_reader_set_sample_limit(dsc_wds_reader_t *r, uint64_t bytes) {
    r->sample_limit = bytes;
}

/* Makes room for `more` bytes after data_used. */
static int reserve(dsc_wds_reader_t *r, uint64_t more) {
    if (more > SIZE_MAX / 4 - r->data_used)
        return set_error(r, DSC_ETOOLARGE, "a file too large to hold in memory");
    if (r->data_used + more <= r->data_cap)
        return 0;
    size_t cap = r->data_cap ? r->data_cap : 1 << 16;
    while (cap < r->data_used + more)
        cap *= 2;
    uint8_t *grown = realloc(r->data, cap);
    if (grown == NULL)
        return set_error(r, DSC_ENOMEM, "out of memory holding a sample");
    r->data = grown;
    r->data_cap = cap;
    return 0;
}

/* Reads the rest of the current entry without holding it; adds its bytes to *counted. */
static int count_rest(dsc_wds_reader_t *r, uint64_t *counted) {
    if (r->scratch == NULL && (r->scratch = malloc(1 << 16)) == NULL)
        return set_error(r, DSC_ENOMEM, "out of memory");
    for (;;) {
        la_ssize_t n = archive_read_data(r->archive, r->scratch, 1 << 16);
        if (n < 0)
            return archive_failure(r, "reading a file");
        if (n == 0)
            return 0;
        *counted += (uint64_t)n;
    }
}

/* Notes that the sample is over the limit, naming the file and its size. */
static void over_limit(dsc_wds_reader_t *r, const char *path, uint64_t size, int declared) {
    if (r->too_large[0] != '\0')
        return; /* the first file over it is named */
    snprintf(
        r->too_large, sizeof r->too_large,
        "file %s: %llu bytes%s, over the %llu-byte limit of a sample (the sample's files up to "
        "this one: %llu bytes)",
        path, (unsigned long long)size,
        declared ? " as its header declares" : " (read to its end: its header gives no size)",
        (unsigned long long)r->sample_limit, (unsigned long long)r->sample_bytes);
}

/* Reads the current entry's data into a new member with extension ext: size bytes as the
 * header declares (known), or read to the end of the entry (not known). */
static int add_member(dsc_wds_reader_t *r, const char *path, const char *ext, uint64_t size,
                      int known) {
    if (r->count == DSC_WDS_MAX_MEMBERS)
        return set_error(r, DSC_ETOOLARGE, "more files in one sample than the reader takes");
    size_t ext_len = strlen(ext);
    if (r->names_used + ext_len + 1 > sizeof r->names)
        return set_error(r, DSC_ETOOLARGE, "the sample's extensions are too long");
    member_slot_t *slot = &r->slots[r->count];
    slot->ext_off = r->names_used;
    for (size_t i = 0; i <= ext_len; i++)
        r->names[r->names_used + i] = (char)tolower((unsigned char)ext[i]);
    r->names_used += ext_len + 1;
    slot->data_off = r->data_used;
    uint64_t room = r->sample_limit > r->sample_bytes ? r->sample_limit - r->sample_bytes : 0;
    if (r->too_large[0] != '\0')
        room = 0; /* the sample is refused already: nothing more of it is held */
    if (!known) {
        /* No size in the header: read in pieces, hold up to the prefix and the limit, count
         * the rest to report the real size. */
        uint64_t hold = r->prefix_limit && r->prefix_limit < room ? r->prefix_limit : room;
        uint64_t got = 0, counted = 0;
        int rc;
        for (;;) {
            uint64_t want = hold - got < (1u << 16) ? hold - got : (1u << 16);
            if (want == 0)
                break;
            if ((rc = reserve(r, want)) < 0)
                return rc;
            la_ssize_t n =
                archive_read_data(r->archive, r->data + r->data_used + got, (size_t)want);
            if (n < 0)
                return archive_failure(r, "reading a file");
            if (n == 0)
                break;
            got += (uint64_t)n;
        }
        counted = got;
        if (got == hold && (rc = count_rest(r, &counted)) < 0)
            return rc;
        if (counted > room && r->too_large[0] == '\0')
            over_limit(r, path, counted, 0);
        r->sample_bytes += counted;
        r->data_used += got;
        r->bytes += counted;
        slot->size = counted;
        slot->held = got;
        r->count++;
        return 0;
    }
    /* The declared size against the limit before any byte of the file is read. */
    if (size > room) {
        r->sample_bytes += size;
        over_limit(r, path, size, 1);
        if (archive_read_data_skip(r->archive) != ARCHIVE_OK)
            return archive_failure(r, "skipping a file over the sample limit");
        r->bytes += size;
        slot->size = size;
        slot->held = 0;
        r->count++;
        return 0;
    }
    r->sample_bytes += size;
    uint64_t keep = r->prefix_limit && size > r->prefix_limit ? r->prefix_limit : size;
    int rc = reserve(r, keep);
    if (rc < 0)
        return rc;
    uint64_t got = 0;
    while (got < keep) {
        la_ssize_t n =
            archive_read_data(r->archive, r->data + r->data_used + got, (size_t)(keep - got));
        if (n < 0)
            return archive_failure(r, "reading a file");
        if (n == 0)
            return set_error(r, DSC_ETRUNCATED, "the tar ends inside a file");
        got += (uint64_t)n;
    }
    if (keep < size && archive_read_data_skip(r->archive) != ARCHIVE_OK)
        return archive_failure(r, "skipping the rest of a file");
    r->data_used += keep;
    r->bytes += size;
    slot->size = size;
    slot->held = keep;
    r->count++;
    return 0;
}

static int start_sample(dsc_wds_reader_t *r, const char *path, size_t key_len) {
    memcpy(r->key, path, key_len);
    r->key[key_len] = '\0';
    r->count = 0;
    r->names_used = 0;
    r->data_used = 0;
    r->sample_bytes = 0;
    r->too_large[0] = '\0';
    return 0;
}

static void finish_sample(dsc_wds_reader_t *r, const dsc_wds_sample_t **out) {
    r->sample.key = r->key;
    r->sample.ordinal = r->ordinal++;
    r->sample.member_count = r->count;
    r->sample.members = r->members;
    r->sample.duplicate = NULL;
    r->sample.too_large = r->too_large[0] ? r->too_large : NULL;
    for (uint32_t i = 0; i < r->count; i++) {
        r->members[i].ext = r->names + r->slots[i].ext_off;
        static const uint8_t empty[1];
        r->members[i].data = r->data ? r->data + r->slots[i].data_off : empty;
        r->members[i].size = r->slots[i].size;
        r->members[i].held = r->slots[i].held;
        for (uint32_t j = 0; j < i && r->sample.duplicate == NULL; j++)
            if (strcmp(r->members[i].ext, r->members[j].ext) == 0)
                r->sample.duplicate = r->members[i].ext;
    }
    *out = &r->sample;
}

int dsc_wds_reader_next(dsc_wds_reader_t *r, const dsc_wds_sample_t **out) {
    if (r->error < 0)
        return r->error;
    if (r->at_end)
        return 0;
    r->count = 0;
    r->key[0] = '\0';
    if (r->pending) {
        size_t key_len;
        const char *ext;
        dsc_wds_split(r->pending_path, &key_len, &ext);
        start_sample(r, r->pending_path, key_len);
        r->pending = 0;
        int rc = add_member(r, r->pending_path, ext, r->pending_size, r->pending_known);
        if (rc < 0)
            return rc;
    }
    for (;;) {
        struct archive_entry *entry;
        int rc = archive_read_next_header(r->archive, &entry);
        if (rc == ARCHIVE_EOF) {
            r->at_end = 1;
            if (r->count == 0)
                return 0;
            finish_sample(r, out);
            return 1;
        }
        if (rc != ARCHIVE_OK && rc != ARCHIVE_WARN)
            return archive_failure(r, "reading a tar header");
        const char *path = archive_entry_pathname(entry);
        if (archive_entry_filetype(entry) != AE_IFREG || path == NULL) {
            r->skipped_files++;
            continue;
        }
        size_t path_len = strlen(path);
        if (path_len > DSC_WDS_MAX_NAME)
            return set_error(r, DSC_ETOOLARGE, "a file name over 1024 bytes");
        /* a header may give no size (libarchive then says 0 and size_is_set 0): the data is
         * read in bounded pieces instead of trusted */
        int known = archive_entry_size_is_set(entry) != 0;
        int64_t size = known ? archive_entry_size(entry) : 0;
        if (size < 0)
            return set_error(r, DSC_EBADHEADER, "a file with a negative size");
        size_t key_len;
        const char *ext;
        if (dsc_wds_split(path, &key_len, &ext) < 0) {
            r->skipped_files++;
            continue;
        }
        if (r->count > 0 && (strlen(r->key) != key_len || memcmp(r->key, path, key_len) != 0)) {
            memcpy(r->pending_path, path, path_len + 1);
            r->pending_size = (uint64_t)size;
            r->pending_known = known;
            r->pending = 1;
            finish_sample(r, out);
            return 1;
        }
        if (r->count == 0)
            start_sample(r, path, key_len);
        rc = add_member(r, path, ext, (uint64_t)size, known);
        if (rc < 0)
            return rc;
    }
}

const char *dsc_wds_reader_error(const dsc_wds_reader_t *r) {
    return r->message;
}

const char *dsc_wds_reader_key(const dsc_wds_reader_t *r) {
    return r->key;
}

uint64_t dsc_wds_reader_bytes(const dsc_wds_reader_t *r) {
    return r->bytes;
}

uint64_t dsc_wds_reader_skipped_files(const dsc_wds_reader_t *r) {
    return r->skipped_files;
}

uint64_t dsc_wds_reader_position(const dsc_wds_reader_t *r) {
    la_int64_t n = archive_filter_bytes(r->archive, -1);
    return n > 0 ? (uint64_t)n : 0;
}

void dsc_wds_reader_close(dsc_wds_reader_t *r) {
    if (r == NULL)
        return;
    archive_read_free(r->archive);
    free(r->data);
    free(r->scratch);
    free(r);
}
