// cli/cmd_profile.c — `ridge profile`: measure one device through the HAL
// (runtime/profile.h) and write the calibrated device class the planner
// reads (configs/devices/calibrated/NAME.yaml).
//
// Without -o nothing is written: the profile is printed with the path the
// class would go to, so neither a test nor a user replaces a calibration by
// accident. -o - prints the class on stdout (the summary then goes to
// stderr). The target must be a regular file or a new one: `ridge plan`
// reads a calibrated class back, and its loader refuses anything else.
#include <errno.h>
#include <getopt.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/fileio.h"
#include "base/units.h"
#include "cli/cli.h"
#include "cli/output.h"
#include "devices/devices.h"
#include "planner/planner.h"
#include "runtime/profile.h"

#define CMD "profile"

static void usage(FILE *f) {
  fprintf(f,
          "usage: ridge profile [--device D] [-o FILE] [--class NAME] [--model M] [--quick]\n"
          "                     [--threads N] [--json]\n"
          "\n"
          "Measures what a device really does, through ridge's own kernels: read, write and\n"
          "copy bandwidth, host <-> device copies, the cost of one op, matmul FLOP/s for\n"
          "f32, bf16, f16 and q8_0 weights (those the device runs) over M = 1 to 4096 at the\n"
          "shapes of one layer of a model, and decode attention over context lengths. Then\n"
          "derives the calibrated device class the planner reads in place of the datasheet:\n"
          "the efficiency curve over M per dtype, the memory bandwidth and its streaming\n"
          "efficiency, attention's efficiency, the fixed costs per step and layer, and per\n"
          "stage kind of the test model (embed, attention, ffn, lm_head) its cost per call and\n"
          "token, its first call's, the process's once-only kernel builds, and what a call\n"
          "costs more after its worker waited for another's data (cold), each marked as\n"
          "measured by ridge profile with the date and device.\n"
          "\n"
          "  --device D    the device, as `ridge devices` names it (default cpu:0)\n"
          "  -o FILE       write the calibrated class there; `ridge plan` and `ridge catalog`\n"
          "                read CONFIG/devices/calibrated/NAME.yaml. `-o -`: stdout. Without\n"
          "                -o nothing is written (the path it would go to is printed)\n"
          "  --class NAME  the class the device stands for (default: its class in `ridge\n"
          "                devices`, e.g. local-cpu); must be a class in CONFIG/devices\n"
          "  --model M     whose layer shapes to measure: a name in configs/models, a model\n"
          "                YAML, a config.json or a model folder (default: the 1b test model,\n"
          "                Llama-3.2-1B's shapes)\n"
          "  --quick       a few seconds: M = 1, 4, 8, 16, 256, smaller buffers (the full profile\n"
          "                takes under a minute)\n"
          "  --threads N   CPU threads (default 0: one per core)\n"
          "  --json        the measurements and the derived class as JSON on stdout\n"
          "\n"
          "Progress goes to stderr (not with --quiet or --json).\n"
          "\n"
          "examples:\n"
          "  ridge profile --quick\n"
          "  ridge profile --device opencl:0 --class local-cpu -o -\n"
          "  ridge profile --device cuda:0 -o configs/devices/calibrated/h100-sxm.yaml\n");
}

typedef struct {
  const char *device, *out, *cls, *model;
  int quick, json, quiet;
  long long threads;
} args_t;

static rg_status_t parse_args(int argc, char **argv, const rg_cli_common_t *common, args_t *a,
                              int *help) {
  enum { O_DEVICE = 1000, O_CLASS, O_MODEL, O_QUICK, O_THREADS, O_JSON, O_HELP };
  static const struct option longs[] = {
      {"device", required_argument, NULL, O_DEVICE},
      {"output", required_argument, NULL, 'o'},
      {"class", required_argument, NULL, O_CLASS},
      {"model", required_argument, NULL, O_MODEL},
      {"quick", no_argument, NULL, O_QUICK},
      {"threads", required_argument, NULL, O_THREADS},
      {"json", no_argument, NULL, O_JSON},
      {"help", no_argument, NULL, O_HELP},
      {NULL, 0, NULL, 0},
  };
  memset(a, 0, sizeof(*a));
  a->device = "cpu:0";
  a->json = common->json;
  a->quiet = common->quiet;
  *help = 0;
  rg_cli_getopt_reset();
  int c;
  while ((c = getopt_long(argc, argv, ":ho:", longs, NULL)) != -1) {
    switch (c) {
      case O_DEVICE:
        a->device = optarg;
        break;
      case 'o':
        if (!optarg[0])
          return rg_status_make(RG_INVALID_ARGUMENT,
                                "-o needs a file path (or - for stdout), got ''");
        a->out = optarg;
        break;
      case O_CLASS:
        a->cls = optarg;
        break;
      case O_MODEL:
        a->model = optarg;
        break;
      case O_QUICK:
        a->quick = 1;
        break;
      case O_THREADS:
        RG_RETURN_IF_ERROR(rg_parse_count("--threads", optarg, 0, &a->threads));
        if (a->threads > 1024)
          return rg_status_make(RG_INVALID_ARGUMENT,
                                "--threads must be at most 1024, got '%s' (0 means one per core)",
                                optarg);
        break;
      case O_JSON:
        a->json = 1;
        break;
      case 'h':
      case O_HELP:
        *help = 1;
        return NULL;
      default:
        return rg_cli_getopt_error(c, argv, longs);
    }
  }
  if (optind < argc)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "takes no arguments besides its options, got '%s' (name the device "
                          "with --device; see ridge profile --help)",
                          argv[optind]);
  if (a->json && a->out && !strcmp(a->out, "-"))
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "--json and -o - both write to stdout; give -o a file, or drop one");
  return NULL;
}

// ----- Where the class goes -------------------------------------------------------------

static const char *kind_of(mode_t m) {
  return S_ISFIFO(m)   ? "a FIFO"
         : S_ISDIR(m)  ? "a directory"
         : S_ISCHR(m)  ? "a character device"
         : S_ISBLK(m)  ? "a block device"
         : S_ISSOCK(m) ? "a socket"
                       : "not a regular file";
}

// Whether dir is CONFIG/devices/calibrated (which may not exist yet): its
// name is `calibrated` and its parent is the config folder's devices/.
static int is_calibrated_dir(const char *dir, const char *config_dir) {
  char buf[PATH_MAX], want[PATH_MAX], *pa = NULL, *pb = NULL;
  snprintf(buf, sizeof buf, "%s", dir);
  size_t n = strlen(buf);
  while (n > 1 && buf[n - 1] == '/') buf[--n] = 0;
  if (strcmp(basename(buf), "calibrated")) return 0;
  snprintf(buf, sizeof buf, "%s", dir);
  snprintf(want, sizeof want, "%s/devices", config_dir);
  pa = realpath(dirname(buf), NULL);
  pb = realpath(want, NULL);
  int same = pa && pb && !strcmp(pa, pb);
  free(pa);
  free(pb);
  return same;
}

// Whether path lies in CONFIG/devices/calibrated, where the catalog finds it.
static int in_calibrated_dir(const char *path, const char *config_dir) {
  char buf[PATH_MAX];
  snprintf(buf, sizeof buf, "%s", path);
  return is_calibrated_dir(dirname(buf), config_dir);
}

// Checks -o before a minute of measuring, by base/fileio.h's rules, and one
// more: a FIFO or a device, which fileio writes through, is refused, since
// ridge plan reads a calibrated class back and reads only regular files.
// The folder must exist; CONFIG/devices/calibrated is made when missing.
static rg_status_t check_output(const char *path, const char *config_dir) {
  struct stat st, lst;
  if (stat(path, &st) == 0) {
    if (S_ISREG(st.st_mode)) return NULL;
    if (S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode))
      return rg_status_make(RG_INVALID_ARGUMENT,
                            "cannot write calibrated class '%s': it is %s; ridge plan reads a "
                            "calibrated class back and reads only regular files, so give a file "
                            "path (or -o - for stdout)",
                            path, kind_of(st.st_mode));
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "cannot write calibrated class '%s': it is %s; give a file path", path,
                          kind_of(st.st_mode));
  }
  if (errno != ENOENT) return NULL;  // fileio's writer says why when it opens
  if (lstat(path, &lst) == 0) {
    char target[PATH_MAX];
    ssize_t n = readlink(path, target, sizeof target - 1);
    target[n > 0 ? n : 0] = 0;
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "cannot write calibrated class '%s': it is a symbolic link to '%s', "
                          "which does not exist",
                          path, target);
  }
  char buf[PATH_MAX];
  snprintf(buf, sizeof buf, "%s", path);
  const char *dir = dirname(buf);
  if (stat(dir, &st) == 0) {
    if (S_ISDIR(st.st_mode)) return NULL;
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "cannot write calibrated class '%s': '%s' is not a folder", path, dir);
  }
  if (errno == ENOENT && is_calibrated_dir(dir, config_dir)) {
    if (mkdir(dir, 0755) == 0 || errno == EEXIST) return NULL;
    return rg_status_make(RG_IO, "cannot make the folder '%s' for the calibrated class: %s", dir,
                          strerror(errno));
  }
  return rg_status_make(RG_NOT_FOUND,
                        "cannot write calibrated class '%s': the folder '%s' does not exist", path,
                        dir);
}

static rg_status_t write_class(const char *path, const rg_profile_result_t *r) {
  if (!strcmp(path, "-")) {
    RG_RETURN_IF_ERROR(rg_profile_write_class(r, stdout));
    return fflush(stdout) ? rg_status_make(RG_IO, "writing the calibrated class to stdout: %s",
                                           strerror(errno))
                          : NULL;
  }
  rg_file_writer_t *w;
  RG_RETURN_IF_ERROR(rg_file_writer_open(path, "calibrated class", &w));
  return rg_file_writer_finish(w, rg_profile_write_class(r, rg_file_writer_stream(w)));
}

// ----- Output -------------------------------------------------------------------------------

static void on_progress(void *ctx, int step, int total, const char *what) {
  (void)ctx;
  fprintf(stderr, "ridge profile: [%2d/%d] %s\n", step, total, what);
}

static const char *fmt_bw(const rg_profile_bw_t *b, char *buf, size_t len) {
  if (b->rate > 0) return rg_fmt_quantity(b->rate, RG_UNIT_BANDWIDTH, buf, len);
  snprintf(buf, len, "-");
  return buf;
}

static rg_status_t print_text(FILE *f, const rg_profile_result_t *r, const char *would) {
  char b[48], b2[48];
  fprintf(f, "Profile of %s (%s", r->device, r->device_name);
  if (r->threads) fprintf(f, ", %d thread%s", r->threads, r->threads == 1 ? "" : "s");
  fprintf(f, ")%s%s\n", r->cls.have_class ? " as class " : "",
          r->cls.have_class ? r->cls.sheet.name : "");
  fprintf(f, "  %s profile, %.1f s, at the shapes of one layer of %s\n\n",
          r->quick ? "quick" : "full", r->seconds, r->model);

  static const char *const bheads[] = {"memory", "measured", "how"};
  rg_table_t tb;
  rg_table_init(&tb, 3, bheads, "lrl");
  const struct {
    const char *name;
    const rg_profile_bw_t *b;
  } rows[] = {{"read", &r->read},
              {"write", &r->write},
              {"copy on device", &r->copy},
              {"host -> device", &r->to_device},
              {"device -> host", &r->to_host}};
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    rg_table_cell(&tb, "%s", rows[i].name);
    rg_table_cell(&tb, "%s", fmt_bw(rows[i].b, b, sizeof b));
    rg_table_cell(&tb, "%s", rows[i].b->rate > 0 ? rows[i].b->how : rows[i].b->reason);
  }
  rg_table_cell(&tb, "per-op cost");
  if (r->launch > 0) {
    rg_table_cell(&tb, "%s", rg_fmt_quantity(r->launch, RG_UNIT_TIME, b, sizeof b));
    rg_table_cell(&tb, "tiny ops submitted back to back, then one wait");
  } else {
    rg_table_cell(&tb, "-");
    rg_table_cell(&tb, "%s", r->launch_reason);
  }
  rg_status_t s = rg_table_print(&tb, f, 2);
  rg_table_deinit(&tb);
  RG_RETURN_IF_ERROR(s);

  // Matmul: one row per weight type, one column per M.
  int n_m = 0;
  for (int i = 0; i < RG_PROFILE_DTYPES; i++)
    if (r->matmul[i].n > n_m) n_m = r->matmul[i].n;
  const int64_t *ms = NULL;
  for (int i = 0; i < RG_PROFILE_DTYPES; i++)
    if (r->matmul[i].n == n_m) ms = r->matmul[i].m;
  const char *heads[RG_TABLE_MAX_COLS];
  char mhead[RG_PROFILE_MAX_M][24];
  heads[0] = "matmul FLOP/s";
  for (int j = 0; j < n_m; j++) {
    snprintf(mhead[j], sizeof mhead[j], "M %lld", (long long)ms[j]);
    heads[1 + j] = mhead[j];
  }
  heads[1 + n_m] = "peak (path)";
  char align[RG_TABLE_MAX_COLS + 1];
  memset(align, 'r', sizeof align);
  align[0] = 'l';
  align[1 + n_m] = 'l';
  align[2 + n_m] = 0;
  rg_table_init(&tb, 2 + n_m, heads, align);
  for (int i = 0; i < RG_PROFILE_DTYPES; i++) {
    const rg_profile_matmul_t *mm = &r->matmul[i];
    rg_table_cell(&tb, "%s", rg_dtype_name(mm->dtype));
    for (int j = 0; j < n_m; j++)
      rg_table_cell(&tb, "%s",
                    j < mm->n ? rg_fmt_quantity(mm->flops[j], RG_UNIT_FLOPS, b, sizeof b) : "-");
    if (mm->n == 0)
      rg_table_cell(&tb, "not measured: %s", mm->reason);
    else if (mm->peak > 0)
      rg_table_cell(&tb, "%s (%s)", rg_fmt_quantity(mm->peak, RG_UNIT_FLOPS, b, sizeof b),
                    mm->peak_path);
    else
      rg_table_cell(&tb, "%s", mm->peak_path);
  }
  fprintf(f, "\n");
  s = rg_table_print(&tb, f, 2);
  rg_table_deinit(&tb);
  RG_RETURN_IF_ERROR(s);

  fprintf(f, "\n  decode attention, %s KV, %d sequences, %lld/%lld heads x %lld: ",
          rg_dtype_name(r->kv), r->attn_seqs, (long long)r->n_heads, (long long)r->n_kv_heads,
          (long long)r->head_dim);
  if (r->n_ctx == 0) fprintf(f, "not measured: %s", r->attn_reason);
  for (int j = 0; j < r->n_ctx; j++)
    fprintf(f, "%s%s positions %s", j ? ", " : "",
            rg_fmt_tokens((long long)r->ctx[j], b2, sizeof b2),
            rg_fmt_quantity(r->attn_rate[j], RG_UNIT_BANDWIDTH, b, sizeof b));
  fprintf(f, "\n  prompt attention, a %s-token prompt: ",
          rg_fmt_tokens((long long)r->attn_prefill_tokens, b2, sizeof b2));
  if (r->attn_prefill_rate > 0)
    fprintf(f, "%s\n", rg_fmt_quantity(r->attn_prefill_rate, RG_UNIT_FLOPS, b, sizeof b));
  else
    fprintf(f, "not measured: %s\n", r->attn_prefill_reason);

  const rg_profile_derived_t *d = &r->cls;
  if (!d->have_class) return NULL;
  int any = d->bandwidth > 0 || d->layer >= 0;
  for (int i = 0; i < RG_PROFILE_DTYPES; i++) any |= d->curve[i].n > 0;
  fprintf(f, "\nCalibrated class %s (what `ridge plan` would use):\n", d->sheet.name);
  if (!any)
    fprintf(f,
            "  nothing measured that the class has a figure for: every figure stays the "
            "datasheet's\n");
  if (d->bandwidth > 0)
    fprintf(f, "  %-10s %s %s (datasheet %s): %s\n", "memory", d->sheet.tier,
            rg_fmt_quantity(d->bandwidth, RG_UNIT_BANDWIDTH, b, sizeof b),
            rg_fmt_quantity(d->sheet.bandwidth, RG_UNIT_BANDWIDTH, b2, sizeof b2),
            d->bandwidth_why);
  if (d->eff_memory > 0)
    fprintf(f, "  %-10s %.2f: %s\n", "streaming", d->eff_memory, d->eff_memory_why);
  if (d->eff_attention > 0)
    fprintf(f, "  %-10s %.2f: %s\n", "attention", d->eff_attention, d->eff_attention_why);
  if (d->eff_attention_compute > 0)
    fprintf(f, "  %-10s %.2f: %s\n", "prompt att", d->eff_attention_compute,
            d->eff_attention_compute_why);
  if (d->n_attn) {
    fprintf(f, "  %-10s by context:", "");
    for (int i = 0; i < d->n_attn; i++)
      fprintf(f, "%s %lld: %.3g", i ? "," : "", (long long)d->attn_ctx[i], d->attn_eff[i]);
    fprintf(f, " (a step's context picks its point)\n");
  }
  for (int i = 0; i < RG_PROFILE_DTYPES; i++) {
    const rg_profile_curve_t *c = &d->curve[i];
    if (c->n == 0) continue;
    fprintf(f, "  %-10s", rg_dtype_name(c->compute));
    for (int j = 0; j < c->n; j++)
      fprintf(f, "%s M %lld: %.3g", j ? "," : "", (long long)c->m[j], c->eff[j]);
    fprintf(f, "\n  %-10s %s\n", "", c->why);
  }
  if (d->layer >= 0) {
    fprintf(f, "  %-10s %s a step, %s a layer", "overhead",
            rg_fmt_quantity(d->step, RG_UNIT_TIME, b, sizeof b),
            rg_fmt_quantity(d->layer, RG_UNIT_TIME, b2, sizeof b2));
    if (d->process_first >= 0)
      fprintf(f, ", %s once per process (kernel builds)",
              rg_fmt_quantity(d->process_first, RG_UNIT_TIME, b, sizeof b));
    for (int k = 0, n = 0; d->have_first_op && k < RG_OP_COUNT; k++)
      if (d->first_op[k] >= 0)
        fprintf(f, "%s%s %s",
                n++ ? ", " : "; by the op kind that paid it: ", rg_op_name((rg_op_kind_t)k),
                rg_fmt_quantity(d->first_op[k], RG_UNIT_TIME, b, sizeof b));
    fputc('\n', f);
  }
  static const char *const kinds[RG_STAGE_SLOTS] = {"embed", "attention", "ffn", "lm_head"};
  if (d->have_stages) {
    for (int j = 0; j < RG_STAGE_SLOTS; j++) {
      char b3[32];
      char b4[32];
      fprintf(f, "  %-10s %s a call, %s a token, first call %s, %s more a call after a wait",
              kinds[j], rg_fmt_quantity(d->stage[j].call, RG_UNIT_TIME, b, sizeof b),
              rg_fmt_quantity(d->stage[j].token, RG_UNIT_TIME, b2, sizeof b2),
              rg_fmt_quantity(d->stage[j].first, RG_UNIT_TIME, b3, sizeof b3),
              rg_fmt_quantity(d->stage[j].cold, RG_UNIT_TIME, b4, sizeof b4));
      if (d->stage[j].eff > 0) fprintf(f, ", efficiency x %.2f", d->stage[j].eff);
      if (d->stage[j].n_points) fprintf(f, "\n  %-10s a call at its tokens:", "");
      for (int i = 0; i < d->stage[j].n_points; i++)
        fprintf(f, "%s %g: %s", i ? "," : "", d->stage[j].by_tokens[i].tokens,
                rg_fmt_quantity(d->stage[j].by_tokens[i].seconds, RG_UNIT_TIME, b, sizeof b));
      fputc('\n', f);
    }
  } else if (r->stages.reason[0]) {
    fprintf(f, "  %-10s not measured: %s\n", "stages", r->stages.reason);
  }
  if (would) fprintf(f, "\n%s\n", would);
  return NULL;
}

static void json_bw(cJSON *o, const char *key, const rg_profile_bw_t *b, int *bad) {
  cJSON *e = rg_json_obj(o, key, bad);
  if (b->rate > 0) {
    rg_json_num(e, "bytes_per_s", b->rate, bad);
    rg_json_str(e, "how", b->how, bad);
  } else {
    rg_json_null(e, "bytes_per_s", bad);
    rg_json_str(e, "reason", b->reason, bad);
  }
}

static rg_status_t print_json(const rg_profile_result_t *r, const char *path, int written) {
  int bad = 0;
  cJSON *root = cJSON_CreateObject();
  if (!root) bad = 1;
  rg_json_str(root, "device", r->device, &bad);
  rg_json_str(root, "device_name", r->device_name, &bad);
  rg_json_str(root, "date", r->date, &bad);
  rg_json_str(root, "model", r->model, &bad);
  rg_json_bool(root, "quick", r->quick, &bad);
  rg_json_num(root, "seconds", r->seconds, &bad);
  if (r->threads) rg_json_num(root, "threads", r->threads, &bad);
  cJSON *bw = rg_json_obj(root, "bandwidth", &bad);
  json_bw(bw, "read", &r->read, &bad);
  json_bw(bw, "write", &r->write, &bad);
  json_bw(bw, "copy", &r->copy, &bad);
  json_bw(bw, "host_to_device", &r->to_device, &bad);
  json_bw(bw, "device_to_host", &r->to_host, &bad);
  if (r->launch > 0)
    rg_json_num(root, "launch_seconds", r->launch, &bad);
  else
    rg_json_str(root, "launch_reason", r->launch_reason, &bad);
  cJSON *mm = rg_json_arr(root, "matmul", &bad);
  for (int i = 0; i < RG_PROFILE_DTYPES; i++) {
    const rg_profile_matmul_t *m = &r->matmul[i];
    cJSON *e = rg_json_push_obj(mm, &bad);
    rg_json_str(e, "dtype", rg_dtype_name(m->dtype), &bad);
    rg_json_str(e, "compute", rg_dtype_name(m->compute), &bad);
    if (m->peak > 0) rg_json_num(e, "peak_flops", m->peak, &bad);
    rg_json_str(e, "peak_path", m->peak_path, &bad);
    if (m->n == 0) rg_json_str(e, "reason", m->reason, &bad);
    cJSON *pts = rg_json_arr(e, "points", &bad);
    for (int j = 0; j < m->n; j++) {
      cJSON *p = rg_json_push_obj(pts, &bad);
      rg_json_num(p, "m", (double)m->m[j], &bad);
      rg_json_num(p, "flops", m->flops[j], &bad);
      rg_json_num(p, "weight_bytes_per_s", m->stream[j], &bad);
    }
  }
  cJSON *at = rg_json_obj(root, "attention", &bad);
  rg_json_str(at, "kv_dtype", rg_dtype_name(r->kv), &bad);
  rg_json_num(at, "sequences", r->attn_seqs, &bad);
  if (r->n_ctx == 0) rg_json_str(at, "reason", r->attn_reason, &bad);
  cJSON *pts = rg_json_arr(at, "points", &bad);
  for (int j = 0; j < r->n_ctx; j++) {
    cJSON *p = rg_json_push_obj(pts, &bad);
    rg_json_num(p, "context", (double)r->ctx[j], &bad);
    rg_json_num(p, "kv_bytes_per_s", r->attn_rate[j], &bad);
  }
  cJSON *pa = rg_json_obj(at, "prompt", &bad);
  rg_json_num(pa, "tokens", (double)r->attn_prefill_tokens, &bad);
  if (r->attn_prefill_rate > 0)
    rg_json_num(pa, "flops_per_s", r->attn_prefill_rate, &bad);
  else
    rg_json_str(pa, "reason", r->attn_prefill_reason, &bad);
  const rg_profile_derived_t *d = &r->cls;
  if (d->have_class) {
    cJSON *c = rg_json_obj(root, "calibrated", &bad);
    rg_json_str(c, "class", d->sheet.name, &bad);
    if (d->bandwidth > 0) rg_json_num(c, "bandwidth", d->bandwidth, &bad);
    if (d->bandwidth > 0) rg_json_str(c, "bandwidth_from", d->bandwidth_why, &bad);
    rg_json_num(c, "datasheet_bandwidth", d->sheet.bandwidth, &bad);
    if (d->eff_memory > 0) rg_json_num(c, "efficiency_memory", d->eff_memory, &bad);
    if (d->eff_attention > 0) rg_json_num(c, "efficiency_attention", d->eff_attention, &bad);
    if (d->eff_attention_compute > 0)
      rg_json_num(c, "efficiency_attention_compute", d->eff_attention_compute, &bad);
    if (d->n_attn) {
      cJSON *ac = rg_json_arr(c, "efficiency_attention_by_context", &bad);
      for (int i = 0; i < d->n_attn; i++) {
        cJSON *o = rg_json_push_obj(ac, &bad);
        rg_json_num(o, "positions", (double)d->attn_ctx[i], &bad);
        rg_json_num(o, "efficiency", d->attn_eff[i], &bad);
      }
    }
    if (d->layer >= 0) {
      rg_json_num(c, "overhead_step_seconds", d->step, &bad);
      rg_json_num(c, "overhead_layer_seconds", d->layer, &bad);
      if (d->process_first >= 0) rg_json_num(c, "process_first_seconds", d->process_first, &bad);
      if (d->have_first_op) {
        cJSON *fo = rg_json_obj(c, "process_first_by_op_seconds", &bad);
        for (int k = 0; fo && k < RG_OP_COUNT; k++)
          if (d->first_op[k] >= 0)
            rg_json_num(fo, rg_op_name((rg_op_kind_t)k), d->first_op[k], &bad);
      }
    }
    static const char *const kinds[RG_STAGE_SLOTS] = {"embed", "attention", "ffn", "lm_head"};
    const rg_profile_stages_t *S = &r->stages;
    if (d->have_stages) {
      cJSON *so = rg_json_obj(c, "stages", &bad);
      rg_json_str(so, "model", S->model, &bad);
      rg_json_num(so, "layers", (double)S->layers, &bad);
      rg_json_num(so, "steps_per_shape", S->reps, &bad);
      rg_json_num(so, "serving_step_s", S->serve_step, &bad);
      rg_json_num(so, "serving_iterations", (double)S->serve_iterations, &bad);
      for (int j = 0; j < RG_STAGE_SLOTS; j++) {
        cJSON *k = rg_json_obj(so, kinds[j], &bad);
        rg_json_num(k, "call_s", d->stage[j].call, &bad);
        rg_json_num(k, "token_s", d->stage[j].token, &bad);
        rg_json_num(k, "efficiency", d->stage[j].eff > 0 ? d->stage[j].eff : 1, &bad);
        rg_json_num(k, "first_s", d->stage[j].first, &bad);
        rg_json_num(k, "cold_s", d->stage[j].cold, &bad);
        rg_json_num(k, "gapped_s", S->gapped[j], &bad);
        cJSON *bt = rg_json_arr(k, "by_tokens", &bad);
        for (int i = 0; i < d->stage[j].n_points; i++) {
          cJSON *o = rg_json_push_obj(bt, &bad);
          rg_json_num(o, "tokens", d->stage[j].by_tokens[i].tokens, &bad);
          rg_json_num(o, "seconds", d->stage[j].by_tokens[i].seconds, &bad);
        }
        cJSON *shapes = rg_json_arr(k, "shapes", &bad);
        for (int q = 0; q < S->n; q++) {
          const rg_profile_stage_shape_t *sh = &S->shape[q];
          cJSON *o = rg_json_push_obj(shapes, &bad);
          rg_json_num(o, "sequences", sh->seqs, &bad);
          rg_json_num(o, "tokens", sh->tokens, &bad);
          rg_json_num(o, "context", (double)sh->context, &bad);
          rg_json_num(o, "measured_s", sh->seconds[j], &bad);
          rg_json_num(o, "roofline_s", sh->roof[j], &bad);
          rg_json_num(o, "fitted_s", sh->fitted[j], &bad);
        }
      }
    } else {
      rg_json_str(c, "stages_not_measured", S->reason, &bad);
    }
    cJSON *cv = rg_json_obj(c, "compute", &bad);
    for (int i = 0; i < RG_PROFILE_DTYPES; i++) {
      const rg_profile_curve_t *k = &d->curve[i];
      if (k->n == 0) continue;
      cJSON *e = rg_json_obj(cv, rg_dtype_name(k->compute), &bad);
      rg_json_str(e, "weights", rg_dtype_name(k->weights), &bad);
      rg_json_num(e, "peak_flops", k->peak, &bad);
      rg_json_str(e, "peak_from", k->from_datasheet ? "datasheet" : "measured", &bad);
      rg_json_str(e, "why", k->why, &bad);
      cJSON *p = rg_json_arr(e, "points", &bad);
      for (int j = 0; j < k->n; j++) {
        cJSON *q = rg_json_push_obj(p, &bad);
        rg_json_num(q, "m", (double)k->m[j], &bad);
        rg_json_num(q, "efficiency", k->eff[j], &bad);
        if (j < k->n_mem) rg_json_num(q, "memory_efficiency", k->mem[j], &bad);
      }
    }
  }
  cJSON *o = rg_json_obj(root, "output", &bad);
  rg_json_str(o, "path", path, &bad);
  rg_json_bool(o, "written", written, &bad);
  return rg_json_emit(root, bad, stdout);
}

// ----- The command ----------------------------------------------------------------------------

static rg_status_t run(const args_t *a, const rg_cli_common_t *common) {
  rg_catalog_t *cat = NULL;
  rg_device_t *dev = NULL;
  rg_arch_t *model = NULL;
  rg_profile_result_t *r = calloc(1, sizeof(*r));
  if (!r) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
  rg_status_t s = rg_catalog_load(common->config_dir, &cat);
  if (s) goto done;
  char driver[32];
  int index;
  s = rg_device_parse_name(a->device, driver, sizeof driver, &index);
  if (s) goto done;
  rg_device_options_t dopt = {.threads = (int)a->threads};
  s = rg_device_open(driver, index, &dopt, &dev);
  if (s) goto done;
  const rg_device_info_t *info = rg_device_info(dev);
  const char *cname = a->cls ? a->cls : info->class_hint;
  if (!cname[0]) {
    s = rg_status_make(RG_INVALID_ARGUMENT,
                       "%s (%s) has no class in `ridge devices`; name the class it stands for "
                       "with --class NAME (ridge catalog lists them)",
                       a->device, info->name);
    goto done;
  }
  const rg_device_class_t *cls = rg_catalog_find(cat, cname);
  if (!cls) {
    s = rg_status_wrap(rg_catalog_unknown(cat, cname, NULL), "%s",
                       a->cls ? "--class" : "the device's class");
    goto done;
  }
  if (!rg_class_computes(cls)) {
    s = rg_status_make(RG_INVALID_ARGUMENT,
                       "--class %s is a %s tier, which computes nothing; profile a device as a "
                       "class that does",
                       cname, rg_device_kind_name(cls->kind));
    goto done;
  }
  if (a->model) {
    s = rg_model_load(a->model, common->config_dir, &model);
    if (s) goto done;
  }
  char def_path[1200];
  snprintf(def_path, sizeof def_path, "%s/devices/calibrated/%s.yaml", common->config_dir, cname);
  if (a->out && strcmp(a->out, "-")) {
    // The catalog takes a calibrated file's class from its name, and one
    // named after no class stops every `ridge plan` from loading.
    char base[PATH_MAX], want[80];
    snprintf(base, sizeof base, "%s", a->out);
    snprintf(want, sizeof want, "%s.yaml", cname);
    if (in_calibrated_dir(a->out, common->config_dir) && strcmp(basename(base), want)) {
      s = rg_status_make(RG_INVALID_ARGUMENT,
                         "cannot write calibrated class '%s': a file in %s/devices/calibrated "
                         "must be named after the class it calibrates, so %s for %s",
                         a->out, common->config_dir, want, cname);
      goto done;
    }
    s = check_output(a->out, common->config_dir);
    if (s) goto done;
  }

  rg_profile_class_t sheet;
  rg_profile_class_from(cls, &sheet);
  int chatty = !a->quiet && !a->json;
  // The stage figures come from the tiny test model's stage instances:
  // well under a second, and their fixed costs are what the runtime pays.
  char stage_model[2048];
  s = rg_cli_test_model(stage_model, sizeof stage_model, !chatty);
  if (s) goto done;
  rg_profile_options_t po = {
      .quick = a->quick,
      .model = model,
      .cls = &sheet,
      .progress = chatty ? on_progress : NULL,
      .stage_model = stage_model,
      .threads = (int)a->threads,
  };
  if (chatty)
    fprintf(stderr, "ridge profile: %s (%s) as class %s, %s profile%s\n", a->device, info->name,
            cname, a->quick ? "quick" : "full",
            a->quick ? "" : " (under a minute; --quick takes a few seconds)");
  s = rg_profile_run(dev, &po, r);
  if (s) goto done;

  int written = 0;
  if (a->out) {
    s = write_class(a->out, r);
    if (s) goto done;
    written = 1;
  }
  // Where the planner reads it, the planner must load it: say so at once
  // if it does not, rather than at the next `ridge plan`.
  if (written && strcmp(a->out, "-") && in_calibrated_dir(a->out, common->config_dir)) {
    rg_catalog_t *check = NULL;
    s = rg_catalog_load(common->config_dir, &check);
    rg_catalog_destroy(check);
    if (s) {
      s = rg_status_wrap(s, "wrote %s, but the catalog does not load it", a->out);
      goto done;
    }
  }
  if (a->json) {
    s = print_json(r, a->out ? a->out : def_path, written);
    goto done;
  }
  char note[1600];
  if (!a->out)
    snprintf(note, sizeof note,
             "Not written (no -o). `ridge profile --device %s%s%s%s -o %s` puts it where ridge "
             "plan and ridge catalog read it; -o - prints it.",
             a->device, a->quick ? " --quick" : "", a->cls ? " --class " : "", a->cls ? a->cls : "",
             def_path);
  else if (!strcmp(a->out, "-"))
    note[0] = 0;
  else if (in_calibrated_dir(a->out, common->config_dir))
    snprintf(note, sizeof note,
             "Wrote %s: ridge plan now uses it in place of the datasheet, and `ridge catalog %s` "
             "shows both.",
             a->out, cname);
  else
    snprintf(note, sizeof note,
             "Wrote %s. ridge plan and ridge catalog read calibrated classes from %s/devices/"
             "calibrated/; copy it there as %s.yaml to use it.",
             a->out, common->config_dir, cname);
  // With -o - the class is on stdout, so the summary goes to stderr.
  FILE *f = a->out && !strcmp(a->out, "-") ? stderr : stdout;
  if (f == stdout || !a->quiet) s = print_text(f, r, note[0] ? note : NULL);

done:
  rg_arch_destroy(model);
  rg_device_close(dev);
  rg_catalog_destroy(cat);
  free(r);
  return s;
}

int rg_cmd_profile(int argc, char **argv, const rg_cli_common_t *common) {
  args_t a;
  int help;
  rg_status_t s = parse_args(argc, argv, common, &a, &help);
  if (s) return rg_cli_fail(CMD, s);
  if (help) {
    usage(stdout);
    return 0;
  }
  return rg_cli_fail(CMD, run(&a, common));
}
