// gen_model.c — what ftc generate's operand names, and the plan it runs: a plan directory as
// it is; a Hugging Face model directory (config.json: a published model, or ftc run --save's
// full save) imported as ftc import imports it (fe_import), its train section made the
// decode phase's, and planned as ftc compile plans (compile_quietly); an adapter directory
// (adapter_config.json, a PEFT or ftc LoRA save) over the local model directory it names
// as its base; or a .ft planned as ftc compile plans it. A plan made here goes in a
// temporary directory, removed when generation ends, fails, or a signal ends it.
#include "cli.h"

#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

static bool is_file(const char *dir, const char *name) {
    char path[4400];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static bool is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

// `path` without its trailing slashes, into buf.
static void trimmed(const char *path, char *buf, size_t cap) {
    snprintf(buf, cap, "%s", path);
    for (size_t n = strlen(buf); n > 1 && buf[n - 1] == '/'; n--)
        buf[n - 1] = '\0';
}

static json_t *load_object(const char *dir, const char *name, json_error_t *je) {
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    json_t *j = json_load_file(path, 0, je);
    if (j && !json_is_object(j)) {
        json_decref(j);
        snprintf(je->text, sizeof je->text, "not a JSON object");
        je->line = 0;
        return NULL;
    }
    return j;
}

// An adapter directory's base: adapter_config.json's base_model_name_or_path, a local
// model directory (ftc run --save writes its absolute path). EXIT_NOFIT after saying why.
static int adapter_base(Cmdline *cl, int at, GenModel *gm) {
    json_error_t je;
    json_t *cfg = load_object(gm->adapter, "adapter_config.json", &je);
    const char *base = cfg ? json_string_value(json_object_get(cfg, "base_model_name_or_path")) : NULL;
    int rc = 0;
    if (!cfg)
        arg_error(cl, at, "%s/adapter_config.json:%d:%d: %s", gm->adapter, je.line, je.column, je.text), rc = EXIT_NOFIT;
    else if (!base || !base[0])
        arg_error(cl, at, "%s/adapter_config.json names no base_model_name_or_path: give the base model's "
                  "directory, with --adapter %s", gm->adapter, gm->adapter), rc = EXIT_NOFIT;
    else if (!is_dir(base) || !is_file(base, "config.json"))
        arg_error(cl, at, "the adapter's base model '%s' (adapter_config.json's base_model_name_or_path) is not a "
                  "model directory here (no %s/config.json): give its directory, with --adapter %s", base, base,
                  gm->adapter), rc = EXIT_NOFIT;
    else
        trimmed(base, gm->model_dir, sizeof gm->model_dir);
    json_decref(cfg);
    return rc;
}

int gen_model_open(Cmdline *cl, int at, const char *path, GenModel *gm) {
    *gm = (GenModel){.kind = GEN_PLAN};
    size_t n = strlen(path);
    if (is_dir(path) && is_file(path, "plan"))
        return 0;
    if (n > 3 && strcmp(path + n - 3, ".ft") == 0 && !is_dir(path)) {
        FILE *f = fopen(path, "rb");
        if (!f)
            return arg_error(cl, at, "cannot open '%s': %s", path, strerror(errno)), EXIT_NOFIT;
        fclose(f);
        gm->kind = GEN_FT;
        return 0;
    }
    char dir[4096];
    trimmed(path, dir, sizeof dir);
    if (is_dir(path) && is_file(path, "config.json")) {
        gm->kind = GEN_MODEL_DIR;
        snprintf(gm->model_dir, sizeof gm->model_dir, "%s", dir);
        return 0;
    }
    if (is_dir(path) && is_file(path, "adapter_config.json")) {
        gm->kind = GEN_ADAPTER_DIR;
        snprintf(gm->adapter, sizeof gm->adapter, "%s", dir);
        return adapter_base(cl, at, gm);
    }
    arg_error(cl, at, "'%s' is no plan directory (no %s/plan), model directory (no config.json) or adapter "
              "directory (no adapter_config.json), nor a .ft file%s%s", path, dir, is_dir(path) ? "" : ": ",
              is_dir(path) ? "" : strerror(errno ? errno : ENOENT));
    return EXIT_NOFIT;
}

bool gen_model_has_weights(const char *dir) {
    return is_file(dir, "model.safetensors") || is_file(dir, "model.safetensors.index.json");
}

int64_t gen_model_max_pos(const GenModel *gm) {
    json_error_t je;
    json_t *cfg = gm->kind == GEN_MODEL_DIR || gm->kind == GEN_ADAPTER_DIR
                  ? load_object(gm->model_dir, "config.json", &je) : NULL;
    json_t *v = cfg ? json_object_get(cfg, "max_position_embeddings") : NULL;
    if (!json_is_integer(v) && cfg)
        v = json_object_get(cfg, "n_positions");   // (GPT-2's)
    int64_t n = json_is_integer(v) && json_integer_value(v) > 0 ? (int64_t)json_integer_value(v) : 0;
    json_decref(cfg);
    return n;
}

//
// The temporary directory: removed by gen_model_close, or by the signal that ends the
// process (with what a signal handler may call: open, getdents64, unlinkat, close).
//

static char tmp_root[4096];
static volatile sig_atomic_t tmp_made;
static const int tmp_signals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE};
enum { NSIGNALS = sizeof tmp_signals / sizeof tmp_signals[0] };
static struct sigaction tmp_old[NSIGNALS];

struct dirent64_raw {
    uint64_t ino;
    int64_t off;
    unsigned short reclen;
    unsigned char type;
    char name[];
};

// Removes what directory `fd` holds (directories within, `depth` deep), then closes fd.
// (A second pass for what the first's reading, with entries going, may have missed.)
static void empty_dir(int fd, int depth) {
    char buf[4096] __attribute__((aligned(8)));
    for (int pass = 0; pass < 2; pass++) {
        lseek(fd, 0, SEEK_SET);
        long got;
        while ((got = syscall(SYS_getdents64, fd, buf, sizeof buf)) > 0)
            for (long off = 0; off < got;) {
                struct dirent64_raw *d = (struct dirent64_raw *)(buf + off);
                off += d->reclen;
                if (d->name[0] == '.' && (!d->name[1] || (d->name[1] == '.' && !d->name[2])))
                    continue;
                if (unlinkat(fd, d->name, 0) == 0 || depth <= 0)
                    continue;
                int sub = openat(fd, d->name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (sub >= 0) {
                    empty_dir(sub, depth - 1);
                    unlinkat(fd, d->name, AT_REMOVEDIR);
                }
            }
    }
    close(fd);
}

static void remove_tmp(void) {
    if (!tmp_made)
        return;
    int fd = open(tmp_root, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0)
        empty_dir(fd, 4);
    rmdir(tmp_root);
    tmp_made = 0;
}

static void on_signal(int sig) {
    remove_tmp();
    signal(sig, SIG_DFL);
    raise(sig);
}

// A new temporary directory, its handlers installed; -1 after saying why.
static int make_tmp(void) {
    const char *t = getenv("TMPDIR");
    sigset_t block, old;
    sigemptyset(&block);
    for (int i = 0; i < NSIGNALS; i++)
        sigaddset(&block, tmp_signals[i]);
    sigprocmask(SIG_BLOCK, &block, &old);
    snprintf(tmp_root, sizeof tmp_root, "%s/ftc-generate-XXXXXX", t && t[0] ? t : "/tmp");
    bool ok = mkdtemp(tmp_root) != NULL;
    int e = errno;
    if (ok) {
        tmp_made = 1;
        struct sigaction sa = {.sa_handler = on_signal};
        sigemptyset(&sa.sa_mask);
        for (int i = 0; i < NSIGNALS; i++)
            sigaction(tmp_signals[i], &sa, &tmp_old[i]);
    }
    sigprocmask(SIG_SETMASK, &old, NULL);
    if (!ok)
        fprintf(stderr, "ftc generate: error: cannot make a temporary directory for the plan in %s: %s\n",
                t && t[0] ? t : "/tmp", strerror(e));
    return ok ? 0 : -1;
}

void gen_model_close(GenModel *gm) {
    if (!gm->tmp)
        return;
    sigset_t block, old;
    sigemptyset(&block);
    for (int i = 0; i < NSIGNALS; i++)
        sigaddset(&block, tmp_signals[i]);
    sigprocmask(SIG_BLOCK, &block, &old);
    remove_tmp();
    for (int i = 0; i < NSIGNALS; i++)
        sigaction(tmp_signals[i], &tmp_old[i], NULL);
    sigprocmask(SIG_SETMASK, &old, NULL);
    gm->tmp = false;
}

//
// A model directory's .ft: ftc import's, its train section made the decode phase's.
//

// "fp32", "bf16" or "fp16" by config.json's dtype (torch_dtype in older files), as
// from_pretrained loads the weights; fp32 where it names none.
static const char *precision_of(const char *dir) {
    json_error_t je;
    json_t *cfg = load_object(dir, "config.json", &je);
    json_t *d = cfg ? json_object_get(cfg, "dtype") : NULL;
    if (!json_is_string(d) && cfg)
        d = json_object_get(cfg, "torch_dtype");
    const char *s = json_string_value(d), *p = "fp32";
    if (s && strcmp(s, "bfloat16") == 0)
        p = "bf16";
    else if (s && strcmp(s, "float16") == 0)
        p = "fp16";
    json_decref(cfg);
    return p;
}

// The lora(...) line of the adapter at `adapter` (a directory, or its
// adapter_model.safetensors beside its adapter_config.json): its r, alpha and target
// modules. EXIT_NOFIT after saying why.
static int lora_line(const char *adapter, FILE *f) {
    char dir[4096];
    trimmed(adapter, dir, sizeof dir);
    if (!is_dir(dir)) {   // the file: its directory's config
        char *slash = strrchr(dir, '/');
        if (slash)
            slash[slash == dir] = '\0';
        else
            snprintf(dir, sizeof dir, ".");
    }
    json_error_t je;
    json_t *cfg = load_object(dir, "adapter_config.json", &je);
    if (!cfg && je.line > 0)
        return fprintf(stderr, "%s/adapter_config.json:%d:%d: error: not valid JSON: %s\n", dir, je.line, je.column,
                       je.text), EXIT_NOFIT;
    if (!cfg)
        return fprintf(stderr, "ftc generate: error: --adapter %s: cannot read %s/adapter_config.json (%s): its r, "
                       "lora_alpha and target_modules make the plan's LoRA\n", adapter, dir, je.text), EXIT_NOFIT;
    json_t *r = json_object_get(cfg, "r"), *alpha = json_object_get(cfg, "lora_alpha"),
           *targets = json_object_get(cfg, "target_modules");
    int rc = 0;
    if (!json_is_integer(r) || !json_is_number(alpha) || !json_is_array(targets) || !json_array_size(targets)) {
        fprintf(stderr, "ftc generate: error: %s/adapter_config.json: %s\n", dir,
                !json_is_integer(r) ? "no whole number \"r\"" : !json_is_number(alpha) ? "no number \"lora_alpha\""
                : "\"target_modules\" is not a list of module names (ftc generate plans LoRA on named modules)");
        rc = EXIT_NOFIT;
    }
    if (rc == 0)
        fprintf(f, "  lora(r = %lld, alpha = %.17g, targets = [", (long long)json_integer_value(r),
                json_number_value(alpha));
    for (size_t k = 0; rc == 0 && k < json_array_size(targets); k++) {
        const char *t = json_string_value(json_array_get(targets, k));
        bool word = t && t[0];
        for (const char *c = t; word && *c; c++)
            word = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '_' ||
                   *c == '.';
        if (!word) {
            fprintf(stderr, "ftc generate: error: %s/adapter_config.json: target module %zu is not a module's name\n",
                    dir, k);
            rc = EXIT_NOFIT;
        } else {
            fprintf(f, "%s%s", k ? ", " : "", t);
        }
    }
    if (rc == 0)
        fputs("])\n", f);
    json_decref(cfg);
    return rc;
}

// Whether `line` (its leading blanks skipped) sets `key`.
static bool sets(const char *line, const char *key) {
    size_t n = strlen(key);
    if (strncmp(line, key, n) != 0)
        return false;
    for (line += n; *line == ' ' || *line == '\t'; line++)
        ;
    return *line == '=';
}

// The .ft of ftc import for the model directory, its train section the decode phase's:
// one sequence of max_len tokens (the longest the KV cache holds), the weights in the
// precision they load in, SGD (no optimizer state for the plan to hold), LoRA where an
// adapter goes over the weights; the loss and the packing as imported. Into *text
// (malloc'd); EXIT_NOFIT after the importer's error.
static int import_recipe(const GenModel *gm, const char *adapter, int64_t max_len, char **text) {
    char path[4400], *ft = NULL, *out = NULL;
    size_t flen = 0, olen = 0;
    snprintf(path, sizeof path, "%s/config.json", gm->model_dir);
    FILE *f = open_memstream(&ft, &flen);
    int rc = f ? fe_import(path, f) : 1;
    if (f && fclose(f) != 0)
        rc = 1;
    FILE *o = rc == 0 ? open_memstream(&out, &olen) : NULL;
    if (rc == 0 && !o)
        rc = 1;
    bool train = false;
    for (char *line = ft, *next; rc == 0 && line && *line; line = next) {
        next = strchr(line, '\n');
        next = next ? next + 1 : line + strlen(line);
        const char *s = line;
        while (*s == ' ' || *s == '\t')
            s++;
        if (!train && strncmp(line, "train {", 7) == 0) {
            train = true;
            fprintf(o, "train {\n  # ftc generate's: this model's decode phase, a KV cache of %lld tokens\n"
                    "  seq          = %lld\n  batch        = 1\n  precision    = %s\n  optimizer    = sgd(lr = 1e-3)\n",
                    (long long)max_len, (long long)max_len, precision_of(gm->model_dir));
            if (adapter)
                rc = lora_line(adapter, o);
            continue;
        }
        if (train && (*s == '#' || sets(s, "seq") || sets(s, "batch") || sets(s, "micro_batch") ||
                      sets(s, "precision") || sets(s, "master_weights") || sets(s, "optimizer") ||
                      sets(s, "budget") || sets(s, "host_mem") || strncmp(s, "lora(", 5) == 0))
            continue;
        fwrite(line, 1, (size_t)(next - line), o);
    }
    if (o && fclose(o) != 0 && rc == 0)
        rc = 1;
    if (rc == 0 && !train) {
        fprintf(stderr, "ftc generate: error: %s: the imported .ft has no train section\n", path);
        rc = 1;
    }
    free(ft);
    if (rc != 0)
        free(out), out = NULL;
    *text = out;
    return rc ? EXIT_NOFIT : 0;
}

int gen_model_plan(GenModel *gm, const char *ft_path, const char *adapter, int64_t max_len) {
    FtSource src;
    char name[4200];   // (the source's name, which it does not copy)
    if (gm->kind == GEN_FT) {
        if (fe_source_read(&src, ft_path) != 0)
            return fprintf(stderr, "ftc generate: error: cannot read '%s': %s\n", ft_path, strerror(errno)),
                   EXIT_NOFIT;
    } else {
        char *text;
        int rc = import_recipe(gm, adapter, max_len, &text);
        if (rc != 0)
            return rc;
        snprintf(name, sizeof name, "%s (imported)", gm->model_dir);
        fe_source_from_string(&src, name, text);
        free(text);
    }
    int rc = EXIT_NOFIT;
    if (make_tmp() == 0) {
        gm->tmp = true;
        snprintf(gm->plan, sizeof gm->plan, "%s/plan", tmp_root);
        rc = compile_quietly(&src, max_len, gm->plan);
    }
    fe_source_free(&src);
    return rc;
}
