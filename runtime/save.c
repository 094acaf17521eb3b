// save.c — the --save directory: checked before step one, locked while ftc writes it, and
// the trained weights saved into it as one unit.
//
// What a save writes (model.safetensors; with LoRA adapter_model.safetensors and
// adapter_config.json, and with --merge the merged weights too, in a directory of their own,
// merged/model.safetensors: beside the adapter files, a loader that finds both applies the
// adapter to weights that hold it already) is one set,
// from one step. The set is written into DIR/.saved-STEP.tmp.PID, renamed to
// DIR/saved-STEP when complete, and made current by replacing the symbolic link
// DIR/latest with one naming it: a rename, so a reader always finds a whole set from one
// step, never files from two. The names people load (DIR/model.safetensors, ...) are
// links through latest (DIR/model.safetensors -> latest/model.safetensors), so
// transformers' and PEFT's from_pretrained(DIR) read the current set. A kill at any
// point leaves either the set before or the new one current; what it left half-written
// is removed when the directory is next locked.
//
//   DIR/.ftc-lock                    who writes DIR (locked while that ftc lives)
//   DIR/latest -> saved-000300       the current set
//   DIR/saved-000300/...             its files
//   DIR/model.safetensors -> latest/model.safetensors, ...   (DIR/merged -> latest/merged)
//   (weights over the shard size: DIR/model-00001-of-0000N.safetensors, ... and
//   DIR/model.safetensors.index.json, each a link through latest likewise)
//   DIR/checkpoint-000300/           the training state (checkpoint.c)
#include "runtime.h"
#include "fileio.h"
#include "safetensors.h"

#include <jansson.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

// Every name a saved set may hold; a link at DIR/NAME exists exactly for the current
// set's files.
static const char *const artefacts[] = {"model.safetensors", "adapter_model.safetensors",
                                        "adapter_config.json", "merged", "config.json",
                                        "generation_config.json", "tokenizer.json",
                                        "tokenizer_config.json", "special_tokens_map.json",
                                        "vocab.json", "merges.txt", "added_tokens.json",
                                        "chat_template.jinja"};
enum { NARTEFACT = sizeof artefacts / sizeof *artefacts };
enum { MODEL_FILES = 4 };   // artefacts[MODEL_FILES..+1]: the model's config; then the tokenizer's

// The names of the files and directories a saved set holds at its top, each linked at
// DIR/NAME, in the order a save reports them; how many weight files the model's weights
// and merged/'s took (st_write_model's shards).
typedef struct SetNames {
    char **name;
    int n, cap;
    int shards, merged_shards;
} SetNames;

static void add_name(SetNames *s, const char *name) {
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 16;
        s->name = xrealloc(s->name, sizeof(char *) * (size_t)s->cap);
    }
    s->name[s->n++] = xstrdup(name);
}

static void free_names(SetNames *s) {
    for (int i = 0; i < s->n; i++)
        free(s->name[i]);
    free(s->name);
}

// The model's weight files, and the index where there are several.
static void add_weight_names(SetNames *s, int shards) {
    char name[64];
    for (int k = 1; k <= shards; k++) {
        st_shard_name(name, sizeof name, k, shards);
        add_name(s, name);
    }
    if (shards > 1)
        add_name(s, st_index_name);
}

// The files of the model directory the weights came from (--weights DIR) that describe
// the model and its tokenizer, copied beside what a save writes, so that the save loads as
// that directory did: into `into` the tokenizer's, and the model's config too where `model`
// (a full model: the set itself, or merged/; never beside an adapter, whose loader would
// take the directory for a model). Their names into the set's when `link`.
static int copy_side_files(const char *base, const char *into, bool model, bool link, SetNames *set, char *err,
                           size_t errlen) {
    for (int i = model ? MODEL_FILES : MODEL_FILES + 2; i < NARTEFACT; i++) {
        char from[4400], to[8800];   // (into is at most 4400, an artefact's name short)
        if ((size_t)snprintf(from, sizeof from, "%s/%s", base, artefacts[i]) >= sizeof from)
            continue;   // (a base past 4 KB: its side files not found)
        snprintf(to, sizeof to, "%s/%s", into, artefacts[i]);
        struct stat st;
        if (stat(from, &st) != 0 || !S_ISREG(st.st_mode))
            continue;
        if (rt_copy_file(from, to, err, errlen) != 0)
            return -1;
        if (link)
            add_name(set, artefacts[i]);
    }
    return 0;
}

// Whether DIR/NAME is a regular file.
static bool has_file(const char *dir, const char *name) {
    char path[4400];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

bool rt_save_has_config(const Exec *x) {
    return (x->base_model[0] && has_file(x->base_model, "config.json")) ||
           (x->plan_dir && has_file(x->plan_dir, "config.json"));
}

// "bfloat16", "float16" or "float32": the dtype a save writes the weights in (the one their
// --weights checkpoint had), as torch_dtype names it.
static const char *saved_dtype(const Exec *x) {
    for (int i = 0; x->source_dtype && i < x->plan->nbuf; i++)
        if (x->source_dtype[i])
            return x->source_dtype[i] - 1 == ST_BF16 ? "bfloat16" : x->source_dtype[i] - 1 == ST_F16 ? "float16"
                                                                                                     : "float32";
    return "float32";
}

// The plan's config.json into directory `into` (a model's: the set, or merged/) where the
// weights came with none, its torch_dtype the saved weights'; added to the set's names when
// `set` is not NULL.
static int plan_config(const Exec *x, const char *into, SetNames *set, char *err, size_t errlen) {
    char from[4400], to[4400];
    if (!x->plan_dir || has_file(into, "config.json") || !has_file(x->plan_dir, "config.json"))
        return 0;
    snprintf(from, sizeof from, "%s/config.json", x->plan_dir);
    snprintf(to, sizeof to, "%s/config.json", into);
    json_error_t je;
    json_t *cfg = json_load_file(from, JSON_REJECT_DUPLICATES, &je);
    if (!json_is_object(cfg)) {
        rt_fail(err, errlen, "%s: not a config: %s", from, cfg ? "not a JSON object" : je.text);
        json_decref(cfg);
        return -1;
    }
    json_object_set_new(cfg, "torch_dtype", json_string(saved_dtype(x)));
    int rc = rt_json_save(to, cfg, err, errlen);
    json_decref(cfg);
    if (rc != 0)
        return -1;
    if (set)
        add_name(set, "config.json");
    return 0;
}

int rt_save_check(const char *flag, const char *dir, char *err, size_t errlen) {
    struct stat st;
    char where[4096];
    if (stat(dir, &st) == 0) {
        if (!S_ISDIR(st.st_mode))
            return rt_fail(err, errlen, "%s %s: it is a file, not a directory", flag, dir);
        snprintf(where, sizeof where, "%s", dir);
    } else {   // a new directory: its parent must be there
        const char *slash = strrchr(dir, '/');
        if (!slash)
            snprintf(where, sizeof where, ".");
        else if (slash == dir)
            snprintf(where, sizeof where, "/");
        else
            snprintf(where, sizeof where, "%.*s", (int)(slash - dir), dir);
        if (stat(where, &st) != 0 || !S_ISDIR(st.st_mode))
            return rt_fail(err, errlen, "%s %s: there is no directory %s to create it in", flag, dir, where);
    }
    char probe[4200];
    snprintf(probe, sizeof probe, "%s/.ftc-probe.%d", where, (int)getpid());
    int fd = open(probe, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        return rt_fail(err, errlen, "%s %s: cannot write in %s: %s", flag, dir, where, strerror(errno));
    close(fd);
    unlink(probe);
    return 0;
}

static void drop_entry(const char *p) {
    struct stat st;
    if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode))
        rt_remove_dir(p, NULL);
    else
        unlink(p);
}

// What killed saves left in DIR: temporary sets, checkpoints, links and files of
// processes that are gone.
static void clean(const char *dir) {
    char base[4200];
    static const char *const tmp[] = {".tmp."};
    for (int i = 0; i < NARTEFACT; i++) {
        snprintf(base, sizeof base, "%s/%s", dir, artefacts[i]);    // a file being written
        rt_clean_leftovers(base, tmp, 1, true, drop_entry);
    }
    DIR *d = opendir(dir);
    if (!d)
        return;
    // .saved-STEP.tmp.PID, .checkpoint-STEP.tmp.PID, and links being made: .latest.tmp.PID,
    // .NAME.tmp.PID
    for (struct dirent *e; (e = readdir(d));) {
        const char *n = e->d_name, *t = strstr(n, ".tmp.");
        if (t && n[0] == '.') {
            snprintf(base, sizeof base, "%s/%.*s", dir, (int)(t - n), n);
            rt_clean_leftovers(base, tmp, 1, false, drop_entry);
        }
    }
    closedir(d);
}

int rt_save_lock(const char *flag, const char *dir, int *fd_out, char *err, size_t errlen) {
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return rt_fail(err, errlen, "%s %s: cannot create it: %s", flag, dir, strerror(errno));
    char path[4200];
    snprintf(path, sizeof path, "%s/.ftc-lock", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return rt_fail(err, errlen, "%s %s: cannot create %s: %s", flag, dir, path, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        char who[32] = "";
        ssize_t n = pread(fd, who, sizeof who - 1, 0);
        who[n > 0 ? n : 0] = '\0';
        who[strcspn(who, "\n")] = '\0';
        close(fd);
        return rt_fail(err, errlen, "%s %s: another ftc%s%s%s is writing it", flag, dir, *who ? " (pid " : "",
                       who, *who ? ")" : "");
    }
    char pid[32];
    int len = snprintf(pid, sizeof pid, "%d\n", (int)getpid());
    errno = 0;
    if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)len, 0) != len) {
        int e = errno;
        unlink(path);   // (empty, and ours: we hold its lock; an empty lock names no one)
        close(fd);
        return rt_fail(err, errlen, "%s %s: cannot write %s: %s", flag, dir, path, e ? strerror(e) : "a short write");
    }
    clean(dir);
    *fd_out = fd;
    return 0;
}

// The set DIR/latest names ("saved-000300"), or "" when there is none.
static void current(const char *dir, char *name, size_t len) {
    char link[4200];
    snprintf(link, sizeof link, "%s/latest", dir);
    ssize_t n = readlink(link, name, len - 1);
    name[n > 0 ? n : 0] = '\0';
}

// Makes `link` a symbolic link holding `target`, replacing what is there by a rename;
// -1 with err.
static int link_to(const char *dir, const char *link, const char *name, const char *target, char *err,
                   size_t errlen) {
    char have[4200], tmp[4300];
    ssize_t n = readlink(link, have, sizeof have - 1);
    if (n >= 0 && (size_t)n == strlen(target) && memcmp(have, target, (size_t)n) == 0)
        return 0;
    struct stat st;
    if (lstat(link, &st) == 0 && S_ISDIR(st.st_mode))
        return rt_fail(err, errlen, "cannot save %s: it is a directory", link);
    snprintf(tmp, sizeof tmp, "%s/.%s.tmp.%d", dir, name, (int)getpid());
    unlink(tmp);
    if (symlink(target, tmp) != 0 || rename(tmp, link) != 0) {
        int e = errno;
        unlink(tmp);
        return rt_fail(err, errlen, "cannot make %s: %s", link, strerror(e));
    }
    return 0;
}

static bool in_set(const char *name, const SetNames *set) {
    for (int i = 0; i < set->n; i++)
        if (strcmp(name, set->name[i]) == 0)
            return true;
    return false;
}

// With LoRA: the adapter, and the merged weights in merged/ where merge; the side files of
// --weights DIR beside the adapter and in merged/.
static int write_adapter_set(Exec *x, const char *tmp, bool merge, int64_t shard_bytes, SetNames *set, char *err,
                             size_t errlen) {
    char path[4400];
    add_name(set, "adapter_model.safetensors");
    add_name(set, "adapter_config.json");
    int rc = rt_adapters_save(x, tmp, x->base_model[0] ? x->base_model : NULL, err, errlen);
    snprintf(path, sizeof path, "%s/merged", tmp);
    if (merge) {
        add_name(set, "merged");
        if (rc == 0 && mkdir(path, 0777) != 0)
            rc = rt_fail(err, errlen, "cannot create %s: %s", path, strerror(errno));
        if (rc == 0)
            rc = rt_weights_save_merged(x, path, shard_bytes, &set->merged_shards, err, errlen);
    }
    if (rc == 0 && x->base_model[0])
        rc = copy_side_files(x->base_model, tmp, false, true, set, err, errlen);
    if (rc == 0 && x->base_model[0] && merge)
        rc = copy_side_files(x->base_model, path, true, false, set, err, errlen);
    if (rc == 0 && merge)
        rc = plan_config(x, path, NULL, err, errlen);
    bool made;   // (merged/ is linked whole)
    if (rc == 0 && merge)
        rc = rt_save_token_ids(path, &made, err, errlen);
    return rc;
}

// The set's files written into the directory tmp: the weights (in shards of at most
// shard_bytes where they take more; with LoRA the adapter and merged/), then the side
// files of --weights DIR, the config's token ids completed (save_config.c); their names
// into set.
static int write_set(Exec *x, const char *tmp, bool merge, int64_t shard_bytes, SetNames *set, char *err,
                     size_t errlen) {
    if (x->plan->lora_r > 0)
        return write_adapter_set(x, tmp, merge, shard_bytes, set, err, errlen);
    int rc = rt_weights_save(x, tmp, false, shard_bytes, &set->shards, err, errlen);
    if (rc == 0)
        add_weight_names(set, set->shards);
    if (rc == 0 && x->base_model[0])
        rc = copy_side_files(x->base_model, tmp, true, true, set, err, errlen);
    if (rc == 0)
        rc = plan_config(x, tmp, set, err, errlen);
    bool made = false;
    if (rc == 0)
        rc = rt_save_token_ids(tmp, &made, err, errlen);
    if (made)
        add_name(set, "generation_config.json");
    return rc;
}

// Links at the names people load, through latest; then latest swung to the new set `name`.
// Until it is, each link reads the set before (or nothing, the first time).
static int link_set(const char *dir, const char *name, const SetNames *set, char *err, size_t errlen) {
    char link[4300], target[300];
    for (int i = 0; i < set->n; i++) {
        snprintf(link, sizeof link, "%s/%s", dir, set->name[i]);
        snprintf(target, sizeof target, "latest/%s", set->name[i]);
        if (link_to(dir, link, set->name[i], target, err, errlen) != 0)
            return -1;
    }
    snprintf(link, sizeof link, "%s/latest", dir);
    return link_to(dir, link, "latest", name, err, errlen);
}

// What the new set `name` does not hold: links through latest of an earlier set's names
// (another number of shards, a model.safetensors where there are shards now), and earlier
// sets.
static void prune(const char *dir, const char *name, const SetNames *set) {
    char path[4400], have[300];
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        ssize_t k = readlink(path, have, sizeof have - 1);
        have[k > 0 ? k : 0] = '\0';
        if (k > 7 && strncmp(have, "latest/", 7) == 0 && strcmp(have + 7, e->d_name) == 0 &&
            !in_set(e->d_name, set))
            unlink(path);
        else if (strncmp(e->d_name, "saved-", 6) == 0 && strcmp(e->d_name, name) != 0)
            rt_remove_dir(path, NULL);
    }
    if (d)
        closedir(d);
}

// "saved DIR: model.safetensors, config.json (step 300, saved-000300)": the weights once
// (a sharded model by its index), then the rest of the set.
static void say_saved(FILE *out, const char *dir, const SetNames *set, int64_t step, const char *name) {
    fprintf(out, "saved %s:", dir);
    const char *sep = "";
    for (int i = 0; i < set->n; i++) {
        const char *n = set->name[i];
        int shards = !strcmp(n, "merged") ? set->merged_shards : !strcmp(n, st_index_name) ? set->shards : 1;
        if (!strncmp(n, "model-", 6))
            continue;
        fprintf(out, "%s %s%s", sep, !strcmp(n, "merged") ? "merged/" : "",
                !strcmp(n, "merged") ? (shards > 1 ? st_index_name : "model.safetensors") : n);
        if (shards > 1)
            fprintf(out, " (%d shards)", shards);
        sep = ",";
    }
    fprintf(out, " (step %" PRId64 ", %s)\n", step, name);
}

bool rt_saved_set(const char *dir, int64_t step, char *path, size_t cap) {
    char cur[256], name[64], again[64];
    current(dir, cur, sizeof cur);
    snprintf(name, sizeof name, "saved-%06" PRId64, step);
    snprintf(again, sizeof again, "saved-%06" PRId64 "-b", step);
    if (strcmp(cur, name) != 0 && strcmp(cur, again) != 0)
        return false;
    snprintf(path, cap, "%s/%s", dir, cur);
    return true;
}

int rt_save_weights(Exec *x, const char *dir, bool merge, int64_t shard_bytes, FILE *out, char *err,
                    size_t errlen) {
    // The set's directory: saved-STEP, or saved-STEP-b when saved-STEP is the current one
    // (the same step saved again, by a resumed run or another run into DIR).
    char cur[256], name[64], tmp[4300], final[4300];
    current(dir, cur, sizeof cur);
    snprintf(name, sizeof name, "saved-%06" PRId64, x->step);
    if (strcmp(cur, name) == 0)
        snprintf(name, sizeof name, "saved-%06" PRId64 "-b", x->step);
    snprintf(final, sizeof final, "%s/%s", dir, name);
    snprintf(tmp, sizeof tmp, "%s/.%s.tmp.%d", dir, name, (int)getpid());
    rt_remove_dir(tmp, NULL);
    if (mkdir(tmp, 0777) != 0)
        return rt_fail(err, errlen, "cannot create %s: %s", tmp, strerror(errno));
    SetNames set = {0};
    int rc = write_set(x, tmp, merge, shard_bytes, &set, err, errlen);
    if (rc == 0) {
        rt_remove_dir(final, NULL);
        if (rename(tmp, final) != 0)
            rc = rt_fail(err, errlen, "cannot create %s: %s", final, strerror(errno));
    }
    if (rc != 0)
        rt_remove_dir(tmp, NULL);
    if (rc == 0 && (rc = link_set(dir, name, &set, err, errlen)) == 0) {
        prune(dir, name, &set);
        say_saved(out, dir, &set, x->step, name);
    }
    free_names(&set);
    return rc;
}
