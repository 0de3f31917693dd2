/* WebDataset tar reader: walks a tar (any compression libarchive reads) and groups its files
 * into samples as WebDataset does: the key is the path up to the first dot of the file's base
 * name, the rest (lower-cased) is the extension naming the field; consecutive files with the
 * same key form one sample. Plus the pure helpers that classify a member's bytes. */
#ifndef DSC_WDS_H
#define DSC_WDS_H

#include <stddef.h>
#include <stdint.h>

#define DSC_WDS_MAX_MEMBERS 256 /* files per sample */
#define DSC_WDS_MAX_NAME 1024   /* bytes of a member path */

/* Splits a tar member path into key and extension (WebDataset's rule: directory prefix plus the
 * base name's characters before its first dot; the extension is everything after that dot).
 * Returns 0 with *key_len and *ext (points into path), or DSC_EINVAL when the path has no such
 * form (no dot in the base name, nothing before or after it, or a "__name__" meta file at the
 * top level): WebDataset skips those files. Pure. */
int dsc_wds_split(const char *path, size_t *key_len, const char **ext);

/* Parses an integer label as WebDataset's .cls/.txt hold it: ASCII digits with an optional sign,
 * surrounded by optional whitespace, within int64. Returns 0 and *out, or DSC_EINVAL. Pure. */
int dsc_wds_parse_int(const uint8_t *data, size_t len, int64_t *out);

typedef struct dsc_wds_member {
    const char *ext;     /* lower-cased extension, NUL-terminated */
    const uint8_t *data; /* the first `held` bytes of the file */
    uint64_t size;       /* the file's size */
    uint64_t held;       /* bytes in data: size, or the reader's prefix limit when smaller */
} dsc_wds_member_t;

typedef struct dsc_wds_sample {
    const char *key;       /* NUL-terminated */
    uint64_t ordinal;      /* 0-based sample number within this tar */
    uint32_t member_count; /* >= 1 */
    dsc_wds_member_t *members;
    const char *duplicate; /* an extension seen twice in this sample, else NULL */
    /* The sample's files together declare (or, a file without a size in its header, hold) more
     * than the reader's sample limit: what and how much, e.g. "file s01.bin: 536870912 bytes,
     * over the 268435456-byte limit of a sample (the sample's files: 536870913 bytes)"; else
     * NULL. The data of the file that passed the limit, and of the sample's later files, is
     * not held (held 0): the sample is to be refused. */
    const char *too_large;
} dsc_wds_sample_t;

typedef struct dsc_wds_reader dsc_wds_reader_t;

/* Opens a tar file, or a tar held in memory (buf must outlive the reader). prefix_limit: keep at
 * most this many bytes of each file (the rest is skipped; 0: keep everything). Returns 0 and
 * *out, DSC_ENOMEM or DSC_EIO (the file cannot be opened: dsc_wds_reader_error says why; the
 * reader is still returned so the message can be read, and must be closed). */
int dsc_wds_reader_open_file(const char *path, uint64_t prefix_limit, dsc_wds_reader_t **out);
int dsc_wds_reader_open_memory(const void *buf, size_t len, uint64_t prefix_limit,
                               dsc_wds_reader_t **out);
/* Sets the bound on the bytes of one sample's files (their sizes as the tar headers declare
 * them, checked before a file's data is read; a file whose header gives no size is read in
 * pieces and stopped at the bound, then counted to its end without being held). Default:
 * DSC_WDS_DEFAULT_SAMPLE_LIMIT. The reader's memory is then at most the limit (or the prefix
 * limit times the files of a sample) plus 64 KiB, whatever the tar. */
#define DSC_WDS_DEFAULT_SAMPLE_LIMIT (256ull << 20)
void dsc_wds_reader_set_sample_limit(dsc_wds_reader_t *reader, uint64_t bytes);
/* The next sample: returns 1 and *out (valid until the next call), 0 at the end of the tar, or
 * DSC_ETRUNCATED (the tar ends inside a file or a header), DSC_EBADHEADER (a damaged header),
 * DSC_ETOOLARGE (over DSC_WDS_MAX_MEMBERS files or a name over DSC_WDS_MAX_NAME), DSC_ENOMEM,
 * DSC_EIO. After an error, dsc_wds_reader_error says what and dsc_wds_reader_key names the
 * sample being read ("" when none); further calls return the same error. */
int dsc_wds_reader_next(dsc_wds_reader_t *reader, const dsc_wds_sample_t **out);
const char *dsc_wds_reader_error(const dsc_wds_reader_t *reader);
const char *dsc_wds_reader_key(const dsc_wds_reader_t *reader);
/* Bytes of file data read so far and files skipped (no key/extension form, not regular). */
uint64_t dsc_wds_reader_bytes(const dsc_wds_reader_t *reader);
uint64_t dsc_wds_reader_skipped_files(const dsc_wds_reader_t *reader);
/* Bytes consumed from the underlying file or buffer so far (for progress). */
uint64_t dsc_wds_reader_position(const dsc_wds_reader_t *reader);
/* Closes and frees; NULL is a no-op. */
void dsc_wds_reader_close(dsc_wds_reader_t *reader);

#endif
