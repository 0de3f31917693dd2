/* dscache ingest images DIR: an ImageFolder tree (one subfolder per class, labels as torchvision
 * assigns them) into a dataset of image + label, the images kept encoded (u8[], optionally
 * re-encoded smaller) or decoded, resized and center-cropped (u8[3,H,W]); decoding runs on all
 * cores, samples are written in the folder's order. */
#include "cli.h"
#include "dscache.h"
#include "image.h"
#include "ingest_common.h"
#include "jpegenc.h"

#include <cjson/cJSON.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#define CMD "ingest images"
#define BATCH_PER_THREAD 32
#define MAX_SKIPPED_SHOWN 5

static void print_help(void) {
    printf(
        "usage: dscache ingest images DIR -o OUT_DIR (--encoded | --size H[xW]) [OPTIONS]\n"
        "\n"
        "Turns an ImageFolder tree into a dataset: DIR/CLASS/.../FILE, classes = the sorted\n"
        "subfolder names of DIR, label = the class's position in that list (torchvision's\n"
        "ImageFolder), samples class by class, files sorted by folder then name. Files ending in\n"
        ".jpg .jpeg .png .webp (any case) are read; .bmp .ppm .pgm .tif .tiff (ImageFolder reads\n"
        "them, this does not) count as images that do not decode; other files are ignored. The\n"
        "class list goes to the manifest's \"meta\": {\"classes\": [...], ...}.\n"
        "\n"
        "Fields: image, label:i64. Forms:\n"
        "  --encoded            image:u8[]: each file's bytes as they are (checked to decode)\n"
        "      --max-side N     ... re-encoded as JPEG when its longer side exceeds N pixels\n"
        "                       (shrunk to N, aspect kept)\n"
        "      --quality Q      ... re-encoded as JPEG at quality Q (1..100; default 90 with\n"
        "                       --max-side), every image\n"
        "      --no-verify      ... stored after a header check only, without decoding them\n"
        "                       (faster; a damaged image then fails in the loader instead)\n"
        "  --size H[xW]         image:u8[3,H,W]: decoded, the shorter side resized to cover HxW\n"
        "                       (PIL's BILINEAR kernel), center-cropped (W defaults to H)\n"
        "\n"
        "Options:\n"
        "  -o, --output DIR     the dataset directory to create (missing or empty; one that\n"
        "                       holds a dataset needs --replace); it appears only once complete\n"
        "      --name NAME      dataset name (default: OUT_DIR's base name)\n"
        "      --compress C     none, lz4 or lz4hc (default: none with --encoded, where JPEG\n"
        "                       bytes do not shrink, else lz4)\n"
        "      --level N        lz4hc level 1..12 (default 9)\n"
        "      --shard-size B   decoded bytes per shard (default 64M)\n"
        "      --chunk-size B   decoded bytes per chunk (default 1M)\n"
        "      --threads N      decode threads (default: the cores)\n"
        "      --skip-bad       skip images that do not decode (counted and named in the\n"
        "                       summary) instead of failing on the first; the manifest's\n"
        "                       meta \"skipped\" lists them, and sample i is then\n"
        "                       ImageFolder[j], j the i-th index not listed (docs/ingest.md)\n"
        "      --replace        replace the dataset at OUT_DIR: the new one is swapped in by one\n"
        "                       rename when complete, so OUT_DIR holds the whole old or the\n"
        "                       whole new dataset at every instant (--force is the same)\n"
        "  -h, --help           this text\n"
        "\n"
        "Prints a progress bar when stderr is a terminal and a summary at the end.\n"
        "Exit codes: 0 done, 1 failed (an image that does not decode names the file), 2 bad\n"
        "arguments.\n");
}

/* ---- The folder ------------------------------------------------------------------------ */

typedef struct image_file {
    char *path; /* DIR/CLASS/... */
    char *dir;  /* its folder, for the sort */
    char *name; /* its name, for the sort */
    int64_t label;
    uint64_t bytes;
    int readable; /* 0: an image extension this tool does not decode */
} image_file_t;

typedef struct folder {
    char **classes;
    size_t class_count;
    image_file_t *files;
    size_t file_count, file_cap;
    uint64_t total_bytes;
} folder_t;

static int ends_with_ci(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcasecmp(s + n - m, suffix) == 0;
}

/* 1: decoded here, 0: an ImageFolder image format not decoded here, -1: not an image. */
static int image_kind(const char *name) {
    static const char *ours[] = {".jpg", ".jpeg", ".png", ".webp"};
    static const char *theirs[] = {".bmp", ".ppm", ".pgm", ".tif", ".tiff"};
    for (size_t i = 0; i < sizeof ours / sizeof ours[0]; i++)
        if (ends_with_ci(name, ours[i]))
            return 1;
    for (size_t i = 0; i < sizeof theirs / sizeof theirs[0]; i++)
        if (ends_with_ci(name, theirs[i]))
            return 0;
    return -1;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* torchvision sorts os.walk's (root, dirs, files) tuples, then the names in each folder. */
static int cmp_file(const void *a, const void *b) {
    const image_file_t *x = a, *y = b;
    if (x->label != y->label)
        return x->label < y->label ? -1 : 1;
    int c = strcmp(x->dir, y->dir);
    return c ? c : strcmp(x->name, y->name);
}

static char *join(const char *a, const char *b) {
    size_t n = strlen(a) + strlen(b) + 2;
    char *s = malloc(n);
    if (s)
        snprintf(s, n, "%s/%s", a, b);
    return s;
}

static int add_file(folder_t *f, const char *dir, const char *name, int64_t label, uint64_t bytes,
                    int readable) {
    if (f->file_count == f->file_cap) {
        size_t cap = f->file_cap ? f->file_cap * 2 : 1024;
        image_file_t *p = realloc(f->files, cap * sizeof *p);
        if (!p)
            return DSC_ENOMEM;
        f->files = p;
        f->file_cap = cap;
    }
    image_file_t *e = &f->files[f->file_count];
    e->path = join(dir, name);
    e->dir = strdup(dir);
    e->name = strdup(name);
    if (!e->path || !e->dir || !e->name) {
        free(e->path);
        free(e->dir);
        free(e->name);
        return DSC_ENOMEM;
    }
    e->label = label;
    e->bytes = bytes;
    e->readable = readable;
    f->file_count++;
    f->total_bytes += bytes;
    return 0;
}

/* Every image below dir (following links, as torchvision's os.walk(followlinks=True)). */
static int walk(folder_t *f, const char *dir, int64_t label, int depth) {
    if (depth > 64)
        return dsc_cli_fail(CMD, "%s: folders nested over 64 deep (a link cycle?)", dir);
    DIR *d = opendir(dir);
    if (!d)
        return dsc_cli_fail(CMD, "cannot open %s: %s", dir, strerror(errno));
    int rc = DSC_CLI_OK;
    struct dirent *ent;
    while (rc == DSC_CLI_OK && (ent = readdir(d)) != NULL) {
        if (ent->d_name[0] == '.' &&
            (ent->d_name[1] == 0 || (ent->d_name[1] == '.' && ent->d_name[2] == 0)))
            continue;
        char *path = join(dir, ent->d_name);
        struct stat st;
        if (!path) {
            rc = dsc_cli_fail(CMD, "%s", dsc_strerror(DSC_ENOMEM));
        } else if (stat(path, &st) != 0) {
            rc = dsc_cli_fail(CMD, "cannot stat %s: %s", path, strerror(errno));
        } else if (S_ISDIR(st.st_mode)) {
            rc = walk(f, path, label, depth + 1);
        } else if (S_ISREG(st.st_mode) && image_kind(ent->d_name) >= 0) {
            if (add_file(f, dir, ent->d_name, label, (uint64_t)st.st_size,
                         image_kind(ent->d_name)) < 0)
                rc = dsc_cli_fail(CMD, "%s", dsc_strerror(DSC_ENOMEM));
        }
        free(path);
    }
    closedir(d);
    return rc;
}

static int scan(folder_t *f, const char *root) {
    DIR *d = opendir(root);
    if (!d)
        return dsc_cli_fail(CMD, "cannot open %s: %s", root, strerror(errno));
    size_t cap = 0;
    struct dirent *ent;
    int rc = DSC_CLI_OK;
    while ((ent = readdir(d)) != NULL) {
        if (ent->d_name[0] == '.' &&
            (ent->d_name[1] == 0 || (ent->d_name[1] == '.' && ent->d_name[2] == 0)))
            continue;
        char *path = join(root, ent->d_name);
        struct stat st;
        int is_dir = path && stat(path, &st) == 0 && S_ISDIR(st.st_mode);
        free(path);
        if (!is_dir)
            continue;
        if (f->class_count == cap) {
            cap = cap ? cap * 2 : 64;
            char **p = realloc(f->classes, cap * sizeof *p);
            if (!p) {
                rc = dsc_cli_fail(CMD, "%s", dsc_strerror(DSC_ENOMEM));
                break;
            }
            f->classes = p;
        }
        if (!(f->classes[f->class_count] = strdup(ent->d_name))) {
            rc = dsc_cli_fail(CMD, "%s", dsc_strerror(DSC_ENOMEM));
            break;
        }
        f->class_count++;
    }
    closedir(d);
    if (rc != DSC_CLI_OK)
        return rc;
    if (f->class_count == 0)
        return dsc_cli_fail(CMD, "%s holds no class folders (ImageFolder: DIR/CLASS/IMAGE)", root);
    qsort(f->classes, f->class_count, sizeof *f->classes, cmp_str);
    for (size_t c = 0; c < f->class_count && rc == DSC_CLI_OK; c++) {
        char *dir = join(root, f->classes[c]);
        rc = dir ? walk(f, dir, (int64_t)c, 0) : dsc_cli_fail(CMD, "out of memory");
        free(dir);
    }
    if (rc == DSC_CLI_OK && f->file_count == 0)
        return dsc_cli_fail(CMD,
                            "%s: no image files (.jpg .jpeg .png .webp) in its %zu class "
                            "folders",
                            root, f->class_count);
    if (rc == DSC_CLI_OK)
        qsort(f->files, f->file_count, sizeof *f->files, cmp_file);
    return rc;
}

static void folder_free(folder_t *f) {
    for (size_t i = 0; i < f->class_count; i++)
        free(f->classes[i]);
    free(f->classes);
    for (size_t i = 0; i < f->file_count; i++) {
        free(f->files[i].path);
        free(f->files[i].dir);
        free(f->files[i].name);
    }
    free(f->files);
}

/* ---- Per-image work, on the decode threads --------------------------------------------- */

typedef struct job_options {
    int encoded;
    uint32_t height, width; /* --size */
    uint32_t max_side;      /* --max-side (0: none) */
    int quality;            /* --quality (0: none) */
    int no_verify;          /* --no-verify: --encoded bytes stored without a decode */
    int have_size;
} job_options_t;

typedef struct result {
    uint8_t *data; /* the image field's bytes (malloc'ed) */
    size_t len;
    int failed;
    char error[224];
} result_t;

typedef struct pool {
    const folder_t *folder;
    const job_options_t *opt;
    size_t first, count; /* the batch */
    size_t next;         /* next index to take, under lock */
    result_t *results;
    pthread_mutex_t lock;
} pool_t;

static uint8_t *read_all(const char *path, size_t *len, char *err, size_t err_len) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, err_len, "cannot open: %s", strerror(errno));
        return NULL;
    }
    struct stat st;
    uint8_t *buf = NULL;
    if (fstat(fd, &st) != 0 || !(buf = malloc(st.st_size > 0 ? (size_t)st.st_size : 1))) {
        snprintf(err, err_len, "cannot read: %s", strerror(errno ? errno : ENOMEM));
        close(fd);
        return NULL;
    }
    size_t done = 0, want = (size_t)st.st_size;
    while (done < want) {
        ssize_t n = read(fd, buf + done, want - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            snprintf(err, err_len, "cannot read: %s", n < 0 ? strerror(errno) : "file shrank");
            free(buf);
            close(fd);
            return NULL;
        }
        done += (size_t)n;
    }
    close(fd);
    *len = want;
    return buf;
}

static void process(dsc_image_ctx_t *ctx, dsc_jpeg_encoder_t *enc, const job_options_t *opt,
                    const image_file_t *file, result_t *r) {
    r->failed = 1;
    if (!file->readable) {
        snprintf(r->error, sizeof r->error, "not decoded by dscache (JPEG, PNG, WebP only)");
        return;
    }
    size_t len = 0;
    uint8_t *bytes = read_all(file->path, &len, r->error, sizeof r->error);
    if (!bytes)
        return;
    int rc;
    if (!opt->encoded) {
        dsc_image_spec_t spec;
        dsc__image_spec_init(&spec);
        spec.height = opt->height;
        spec.width = opt->width;
        spec.crop = DSC_IMAGE_CROP_CENTER;
        size_t out_len = (size_t)opt->height * opt->width * 3;
        if (!(r->data = malloc(out_len))) {
            rc = DSC_ENOMEM;
        } else if ((rc = dsc__image_decode(ctx, bytes, len, &spec, 0, 0, 0, r->data, out_len,
                                           NULL)) == 0) {
            r->len = out_len;
        }
        free(bytes);
    } else {
        int format;
        uint32_t w = 0, h = 0;
        rc = dsc__image_info(ctx, bytes, len, &format, &w, &h);
        int reencode = rc == 0 && (opt->quality ||
                                   (opt->max_side && (w > opt->max_side || h > opt->max_side)));
        if (rc == 0 && reencode) {
            uint8_t *rgb = NULL;
            rc = dsc__image_decode_rgb(ctx, bytes, len, opt->max_side, &rgb, &w, &h);
            if (rc == 0) {
                rc = dsc_jpeg_encode(enc, rgb, w, h, opt->quality ? opt->quality : 90, &r->data,
                                     &r->len);
                if (rc < 0) {
                    snprintf(r->error, sizeof r->error, "%s (%s)", dsc_strerror(rc),
                             dsc_jpeg_encoder_error(enc));
                    free(rgb);
                    free(bytes);
                    return;
                }
            }
            free(rgb);
            free(bytes);
        } else if (rc == 0 && opt->no_verify) {
            r->data = bytes;
            r->len = len;
        } else if (rc == 0) {
            /* kept as it is, once it is known to decode (a JPEG at 1/8 scale: the entropy
             * decoder still reads every byte, so a truncated file fails here) */
            dsc_image_spec_t spec;
            dsc__image_spec_init(&spec);
            spec.crop = DSC_IMAGE_CROP_NONE;
            spec.height = spec.width = 8;
            uint8_t tiny[8 * 8 * 3];
            rc = dsc__image_decode(ctx, bytes, len, &spec, 0, 0, 0, tiny, sizeof tiny, NULL);
            if (rc == 0) {
                r->data = bytes;
                r->len = len;
            } else {
                free(bytes);
            }
        } else {
            free(bytes);
        }
    }
    if (rc == 0) {
        r->failed = 0;
        return;
    }
    free(r->data);
    r->data = NULL;
    snprintf(r->error, sizeof r->error, "%s (%s)", dsc_strerror(rc), dsc__image_error(ctx));
}

static void *worker(void *arg) {
    pool_t *p = arg;
    dsc_image_ctx_t *ctx = NULL;
    dsc_jpeg_encoder_t *enc = NULL;
    int rc = dsc__image_ctx_create(NULL, &ctx);
    if (rc == 0 && (p->opt->quality || p->opt->max_side))
        rc = dsc_jpeg_encoder_create(&enc);
    for (;;) {
        pthread_mutex_lock(&p->lock);
        size_t i = p->next < p->count ? p->next++ : p->count;
        pthread_mutex_unlock(&p->lock);
        if (i >= p->count)
            break;
        result_t *r = &p->results[i];
        memset(r, 0, sizeof *r);
        if (rc < 0) {
            r->failed = 1;
            snprintf(r->error, sizeof r->error, "%s", dsc_strerror(rc));
            continue;
        }
        process(ctx, enc, p->opt, &p->folder->files[p->first + i], r);
    }
    dsc_jpeg_encoder_destroy(enc);
    dsc__image_ctx_destroy(ctx);
    return NULL;
}

/* ---- The command ----------------------------------------------------------------------- */

/* {"classes": [...], "source": "imagefolder", "image": "encoded"|"decoded", ...} */
static char *meta_json(const folder_t *f, const job_options_t *opt) {
    size_t cap = 256;
    for (size_t c = 0; c < f->class_count; c++)
        cap += strlen(f->classes[c]) * 6 + 4;
    char *s = malloc(cap), *p = s;
    if (!s)
        return NULL;
    p += sprintf(p, "{\"classes\": [");
    for (size_t c = 0; c < f->class_count; c++) {
        *p++ = c ? ',' : ' ';
        *p++ = '"';
        for (const unsigned char *q = (const unsigned char *)f->classes[c]; *q; q++) {
            if (*q == '"' || *q == '\\')
                p += sprintf(p, "\\%c", *q);
            else if (*q < 0x20)
                p += sprintf(p, "\\u%04x", *q);
            else
                *p++ = (char)*q;
        }
        *p++ = '"';
    }
    if (opt->encoded)
        sprintf(p, "], \"source\": \"imagefolder\", \"image\": \"encoded\"}");
    else
        sprintf(p, "], \"source\": \"imagefolder\", \"image\": \"decoded\", \"size\": [%u, %u]}",
                opt->height, opt->width);
    return s;
}

/* The skipped images, recorded in the dataset's meta so that sample i maps back to
 * ImageFolder(DIR)[j] (docs/ingest.md#images-dscache-ingest-images-imagefolder): "skipped":
 * {"count", "source_images" (the folder's files, ImageFolder's length), "indices" (every skipped
 * file's ImageFolder index, ascending: sample i is the i-th index not listed), "files" (the
 * first SKIPPED_FILES_KEPT: index, path relative to DIR, error)}. The meta stays far below the
 * manifest's 1 MiB (META_SKIPPED_MAX): beyond it the ingest fails rather than lose the map. */
#define SKIPPED_FILES_KEPT 1000
#define META_SKIPPED_MAX (768u << 10)

typedef struct skipped {
    uint64_t *indices;
    char **files; /* "path\terror" of the first SKIPPED_FILES_KEPT */
    uint64_t count, cap;
} skipped_t;

static int skipped_add(skipped_t *sk, uint64_t index, const char *path, const char *error) {
    if (sk->count == sk->cap) {
        uint64_t cap = sk->cap ? sk->cap * 2 : 64;
        uint64_t *n = realloc(sk->indices, cap * sizeof *n);
        if (n == NULL)
            return DSC_ENOMEM;
        sk->indices = n;
        sk->cap = cap;
    }
    if (sk->count < SKIPPED_FILES_KEPT) {
        if (sk->files == NULL && !(sk->files = calloc(SKIPPED_FILES_KEPT, sizeof *sk->files)))
            return DSC_ENOMEM;
        size_t len = strlen(path) + strlen(error) + 2;
        if (!(sk->files[sk->count] = malloc(len)))
            return DSC_ENOMEM;
        snprintf(sk->files[sk->count], len, "%s\t%s", path, error);
    }
    sk->indices[sk->count++] = index;
    return 0;
}

static void skipped_free(skipped_t *sk) {
    for (uint64_t i = 0; sk->files != NULL && i < sk->count && i < SKIPPED_FILES_KEPT; i++)
        free(sk->files[i]);
    free(sk->files);
    free(sk->indices);
}

/* meta (the JSON object text of meta_json) with "skipped" added; root: DIR, cut from the paths.
 * Returns the new text (the caller frees it) or NULL (no memory, or over META_SKIPPED_MAX: *why
 * says which). */
static char *meta_with_skipped(const char *meta, const skipped_t *sk, size_t source_images,
                               const char *root, const char **why) {
    *why = "out of memory";
    cJSON *doc = cJSON_Parse(meta), *o = cJSON_CreateObject(), *idx = cJSON_CreateArray(),
          *files = cJSON_CreateArray();
    char *text = NULL;
    if (doc == NULL || o == NULL || idx == NULL || files == NULL)
        goto done;
    size_t cut = strlen(root);
    while (cut > 0 && root[cut - 1] == '/')
        cut--;
    for (uint64_t i = 0; i < sk->count; i++) {
        cJSON_AddItemToArray(idx, cJSON_CreateNumber((double)sk->indices[i]));
        if (i >= SKIPPED_FILES_KEPT)
            continue;
        const char *entry = sk->files[i], *tab = strchr(entry, '\t');
        const char *rel =
            strncmp(entry, root, cut) == 0 && entry[cut] == '/' ? entry + cut + 1 : entry;
        cJSON *f = cJSON_CreateObject();
        char path[4096];
        snprintf(path, sizeof path, "%.*s", (int)(tab - rel), rel);
        cJSON_AddNumberToObject(f, "index", (double)sk->indices[i]);
        cJSON_AddStringToObject(f, "path", path);
        cJSON_AddStringToObject(f, "error", tab + 1);
        cJSON_AddItemToArray(files, f);
    }
    cJSON_AddNumberToObject(o, "count", (double)sk->count);
    cJSON_AddNumberToObject(o, "source_images", (double)source_images);
    cJSON_AddItemToObject(o, "indices", idx);
    cJSON_AddItemToObject(o, "files", files);
    idx = files = NULL;
    cJSON_AddItemToObject(doc, "skipped", o);
    o = NULL;
    text = cJSON_PrintUnformatted(doc);
    if (text != NULL && strlen(text) > META_SKIPPED_MAX) {
        *why = "too many images skipped to record which (over 768 KiB of meta): fix or remove "
               "them first";
        free(text);
        text = NULL;
    }
done:
    cJSON_Delete(doc);
    cJSON_Delete(o);
    cJSON_Delete(idx);
    cJSON_Delete(files);
    return text;
}

static int parse_hw(const char *text, uint32_t *h, uint32_t *w) {
    char *end;
    unsigned long a = strtoul(text, &end, 10), b = a;
    if (end == text)
        return -1;
    if (*end == 'x' || *end == 'X') {
        const char *q = end + 1;
        b = strtoul(q, &end, 10);
        if (end == q)
            return -1;
    }
    if (*end || a < 1 || a > 8192 || b < 1 || b > 8192)
        return -1;
    *h = (uint32_t)a;
    *w = (uint32_t)b;
    return 0;
}

enum { OPT_ENCODED = INGEST_FORM_OPTION, OPT_SIZE, OPT_MAX_SIDE, OPT_QUALITY, OPT_NO_VERIFY };

static int images_option(void *state, int id, const char *arg) {
    job_options_t *opt = state;
    uint64_t v;
    switch (id) {
    case OPT_ENCODED:
        opt->encoded = 1;
        return DSC_CLI_OK;
    case OPT_SIZE:
        if (parse_hw(arg, &opt->height, &opt->width) < 0)
            return dsc_cli_usage(CMD, "--size: H or HxW, 1..8192 each, not '%s'", arg);
        opt->have_size = 1;
        return DSC_CLI_OK;
    case OPT_MAX_SIDE:
        if (dsc_cli_parse_u64(CMD, "--max-side", arg, 1, 65500, &v) < 0)
            return DSC_CLI_USAGE;
        opt->max_side = (uint32_t)v;
        return DSC_CLI_OK;
    case OPT_QUALITY:
        if (dsc_cli_parse_u64(CMD, "--quality", arg, 1, 100, &v) < 0)
            return DSC_CLI_USAGE;
        opt->quality = (int)v;
        return DSC_CLI_OK;
    default: /* OPT_NO_VERIFY */
        opt->no_verify = 1;
        return DSC_CLI_OK;
    }
}

static int images_run(void *state, const ingest_options_t *common, int argc, char **argv) {
    job_options_t opt = *(const job_options_t *)state;
    if (argc != 1)
        return dsc_cli_usage(CMD, argc < 1 ? "missing DIR (the ImageFolder root)" : "one DIR only");
    const char *root = argv[0];
    const char *out_dir = common->out_dir;
    uint64_t threads = common->threads;
    if (opt.encoded == opt.have_size)
        return dsc_cli_usage(CMD, "give one of --encoded or --size H[xW]");
    if (!opt.encoded && (opt.max_side || opt.quality || opt.no_verify))
        return dsc_cli_usage(CMD, "--max-side, --quality and --no-verify apply to --encoded only");
    /* JPEG bytes do not shrink: --encoded stores them raw unless told otherwise */
    const char *compress = common->compress_given ? common->compress : opt.encoded ? "none" : "lz4";
    if (threads == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        threads = n > 0 ? (uint64_t)n : 1;
    }

    folder_t folder = {0};
    ingest_run_t *run = NULL;
    result_t *results = NULL;
    pthread_t *tids = NULL;
    char *meta = NULL;
    int exit_code = scan(&folder, root);
    uint64_t written = 0, skipped = 0;
    char first_skipped[MAX_SKIPPED_SHOWN][512];
    skipped_t skipped_list = {0};
    if (exit_code != DSC_CLI_OK)
        goto cleanup;
    exit_code = DSC_CLI_FAIL;
    if (!(meta = meta_json(&folder, &opt))) {
        dsc_cli_fail(CMD, "%s", dsc_strerror(DSC_ENOMEM));
        goto cleanup;
    }
    /* image:u8[] (encoded) or image:u8[3,H,W], and label:i64 */
    ingest_field_t fields[2];
    memset(fields, 0, sizeof fields);
    snprintf(fields[0].name, sizeof fields[0].name, "image");
    fields[0].dtype = DSC_DTYPE_U8;
    fields[0].ndim = opt.encoded ? 1 : 3;
    fields[0].dims[0] = opt.encoded ? 0 : 3;
    fields[0].dims[1] = opt.height;
    fields[0].dims[2] = opt.width;
    snprintf(fields[1].name, sizeof fields[1].name, "label");
    fields[1].dtype = DSC_DTYPE_I64;
    ingest_options_t run_opt = *common;
    run_opt.compress = compress;
    run_opt.threads = (uint32_t)threads;
    exit_code = ingest_run_begin(CMD, &run_opt, fields, 2, meta, folder.total_bytes, &run);
    if (exit_code != DSC_CLI_OK)
        goto cleanup;
    exit_code = DSC_CLI_FAIL;
    size_t batch = (size_t)threads * BATCH_PER_THREAD;
    results = calloc(batch, sizeof *results);
    tids = calloc(threads, sizeof *tids);
    if (!results || !tids) {
        dsc_cli_fail(CMD, "%s", dsc_strerror(DSC_ENOMEM));
        goto cleanup;
    }
    uint64_t bytes_done = 0;
    for (size_t first = 0; first < folder.file_count; first += batch) {
        pool_t pool = {.folder = &folder, .opt = &opt, .first = first, .results = results};
        pool.count = folder.file_count - first < batch ? folder.file_count - first : batch;
        pthread_mutex_init(&pool.lock, NULL);
        uint64_t started = 0;
        for (; started < threads && started < pool.count; started++)
            if (pthread_create(&tids[started], NULL, worker, &pool) != 0)
                break;
        if (started == 0)
            worker(&pool);
        for (uint64_t t = 0; t < started; t++)
            pthread_join(tids[t], NULL);
        pthread_mutex_destroy(&pool.lock);
        int failed = 0;
        for (size_t i = 0; i < pool.count && !failed; i++) {
            const image_file_t *file = &folder.files[first + i];
            result_t *r = &results[i];
            bytes_done += file->bytes;
            if (r->failed) {
                if (ingest_run_bad(run, file->path, "image", 1, "%s", r->error) != 0) {
                    failed = 1;
                    break;
                }
                if (skipped < MAX_SKIPPED_SHOWN)
                    snprintf(first_skipped[skipped], sizeof first_skipped[0], "%s: %s", file->path,
                             r->error);
                skipped++;
                if (skipped_add(&skipped_list, first + i, file->path, r->error) < 0) {
                    dsc_cli_fail(CMD, "%s", dsc_strerror(DSC_ENOMEM));
                    failed = 1;
                    break;
                }
                continue;
            }
            ingest_value_t values[2] = {{r->data, r->len}, {&file->label, sizeof(int64_t)}};
            if (ingest_run_add(run, values) != 0) {
                failed = 1;
                break;
            }
            written++;
        }
        for (size_t i = 0; i < pool.count; i++) {
            free(results[i].data);
            results[i].data = NULL;
        }
        if (failed)
            goto cleanup;
        ingest_run_progress(run, bytes_done);
    }
    if (written == 0) {
        dsc_cli_fail(CMD, "%s: none of its %zu images decodes", root, folder.file_count);
        goto cleanup;
    }
    if (skipped > 0) { /* which, so that a sample maps back to its ImageFolder index */
        const char *why = NULL;
        char *with = meta_with_skipped(meta, &skipped_list, folder.file_count, root, &why);
        if (with == NULL || ingest_run_set_meta(run, with) < 0) {
            dsc_cli_fail(CMD, "%s: cannot record the skipped images: %s", out_dir, why);
            free(with);
            goto cleanup;
        }
        free(with);
    }
    exit_code = ingest_run_finish(run);
    run = NULL;
    if (exit_code != DSC_CLI_OK)
        goto cleanup;
    printf("ingest images: %llu images of %zu classes from %s -> %s (%s), %llu threads\n",
           (unsigned long long)written, folder.class_count, root, out_dir,
           opt.encoded ? "encoded" : "decoded", (unsigned long long)threads);
    if (skipped) {
        printf("ingest images: skipped %llu images that do not decode (--skip-bad):\n",
               (unsigned long long)skipped);
        for (uint64_t i = 0; i < skipped && i < MAX_SKIPPED_SHOWN; i++)
            printf("  %s\n", first_skipped[i]);
        if (skipped > MAX_SKIPPED_SHOWN)
            printf("  ... and %llu more\n", (unsigned long long)(skipped - MAX_SKIPPED_SHOWN));
        printf("ingest images: the manifest's meta \"skipped\" lists their ImageFolder indices: "
               "sample i is ImageFolder[j], j the i-th index not listed (dscache inspect %s)\n",
               out_dir);
    }
cleanup:
    ingest_run_abort(run);
    skipped_free(&skipped_list);
    free(results);
    free(tids);
    free(meta);
    folder_free(&folder);
    return exit_code;
}

int dsc_ingest_images(int argc, char **argv) {
    static const struct option options[] = {{"encoded", no_argument, NULL, OPT_ENCODED},
                                            {"size", required_argument, NULL, OPT_SIZE},
                                            {"max-side", required_argument, NULL, OPT_MAX_SIDE},
                                            {"quality", required_argument, NULL, OPT_QUALITY},
                                            {"no-verify", no_argument, NULL, OPT_NO_VERIFY},
                                            {NULL, 0, NULL, 0}};
    static const ingest_form_t form = {
        CMD,           INGEST_OPT_WRITER | INGEST_OPT_THREADS | INGEST_OPT_SKIP_BAD,
        options,       print_help,
        images_option, images_run};
    job_options_t opt;
    memset(&opt, 0, sizeof opt);
    return ingest_main(&form, &opt, argc, argv);
}
