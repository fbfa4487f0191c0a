// The shared secret and the handshake's MACs, on libsodium: crypto_auth is
// HMAC-SHA-512/256 and its verify is constant-time, randombytes_buf draws
// nonces from the kernel, and BLAKE2b turns secret text of any length into
// a key.
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/control/control_impl.h"

_Static_assert(crypto_auth_BYTES == RG__CONTROL_NONCE_BYTES, "proofs are nonce-sized");
_Static_assert(crypto_auth_KEYBYTES == sizeof(((rg_control_secret_t *)0)->key), "key size");

// A secret is a line of text (a passphrase, 64 hex digits); anything far
// longer is probably the wrong file.
#define SECRET_MAX_BYTES 4096

static pthread_once_t sodium_once = PTHREAD_ONCE_INIT;
static int sodium_rc;
static void sodium_init_once(void) {
  sodium_rc = sodium_init();
}

rg_status_t rg__control_crypto_init(void) {
  pthread_once(&sodium_once, sodium_init_once);
  if (sodium_rc < 0)
    return rg_status_make(RG_INTERNAL, "libsodium failed to initialise (no random source?)");
  return NULL;
}

void rg__control_random(void *buf, size_t len) {
  randombytes_buf(buf, len);
}

// What is MACed: label, a NUL so no label is a prefix of another's input,
// then both nonces. The labels keep one side's proof from passing as the
// other's.
static void mac_input(const char *label, const uint8_t *a, const uint8_t *b, uint8_t *buf,
                      size_t *len) {
  size_t l = strlen(label);
  memcpy(buf, label, l);
  buf[l] = 0;
  memcpy(buf + l + 1, a, RG__CONTROL_NONCE_BYTES);
  memcpy(buf + l + 1 + RG__CONTROL_NONCE_BYTES, b, RG__CONTROL_NONCE_BYTES);
  *len = l + 1 + 2 * RG__CONTROL_NONCE_BYTES;
}

void rg__control_mac(const rg_control_secret_t *s, const char *label, const uint8_t *a,
                     const uint8_t *b, uint8_t out[RG__CONTROL_NONCE_BYTES]) {
  uint8_t buf[64 + 2 * RG__CONTROL_NONCE_BYTES];
  size_t len;
  mac_input(label, a, b, buf, &len);
  crypto_auth(out, buf, len, s->key);
}

bool rg__control_mac_ok(const rg_control_secret_t *s, const char *label, const uint8_t *a,
                        const uint8_t *b, const uint8_t *proof) {
  uint8_t buf[64 + 2 * RG__CONTROL_NONCE_BYTES];
  size_t len;
  mac_input(label, a, b, buf, &len);
  return crypto_auth_verify(proof, buf, len, s->key) == 0;
}

rg_status_t rg_control_secret_from_text(const char *text, size_t len, rg_control_secret_t *out) {
  RG_RETURN_IF_ERROR(rg__control_crypto_init());
  if (!text || len == 0) return rg_status_make(RG_INVALID_ARGUMENT, "the shared secret is empty");
  static const char domain[] = "ridge control secret v1";
  crypto_generichash_state st;
  crypto_generichash_init(&st, NULL, 0, sizeof out->key);
  crypto_generichash_update(&st, (const unsigned char *)domain, sizeof domain);
  crypto_generichash_update(&st, (const unsigned char *)text, len);
  crypto_generichash_final(&st, out->key, sizeof out->key);
  sodium_memzero(&st, sizeof st);
  return NULL;
}

static size_t trim_trailing_space(const char *s, size_t n) {
  while (n && (s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == ' ' || s[n - 1] == '\t')) n--;
  return n;
}

static rg_status_t load_file(const char *path, rg_control_secret_t *out) {
  rg_status_t s = NULL;
  char buf[SECRET_MAX_BYTES + 1];
  size_t have = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return rg_status_make(errno == ENOENT ? RG_NOT_FOUND : RG_IO,
                          "cannot open secret file '%s': %s", path, strerror(errno));
  // fstat on the open file, not stat on the path, so the checks apply to
  // the bytes read.
  struct stat st;
  if (fstat(fd, &st) != 0) {
    s = rg_status_make(RG_IO, "cannot stat secret file '%s': %s", path, strerror(errno));
    goto close_fd;
  }
  if (!S_ISREG(st.st_mode)) {
    s = rg_status_make(RG_INVALID_ARGUMENT, "secret file '%s' is not a regular file", path);
    goto close_fd;
  }
  // The rule ssh applies to private keys: no access for group or others.
  if (st.st_mode & 077) {
    s = rg_status_make(RG_INVALID_ARGUMENT,
                       "secret file '%s' has mode %04o: other users can %s it; a shared secret "
                       "must be private to its owner (chmod 600 '%s')",
                       path, (unsigned)(st.st_mode & 07777), (st.st_mode & 044) ? "read" : "write",
                       path);
    goto close_fd;
  }
  for (;;) {
    ssize_t n = read(fd, buf + have, sizeof buf - have);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      s = rg_status_make(RG_IO, "cannot read secret file '%s': %s", path, strerror(errno));
      goto wipe;
    }
    if (n == 0) break;
    have += (size_t)n;
    if (have == sizeof buf) {
      s = rg_status_make(RG_INVALID_ARGUMENT,
                         "secret file '%s' is larger than %d bytes; a secret is one line of text "
                         "(e.g. 64 hex digits)",
                         path, SECRET_MAX_BYTES);
      goto wipe;
    }
  }
  have = trim_trailing_space(buf, have);
  if (have == 0) {
    s = rg_status_make(RG_INVALID_ARGUMENT, "secret file '%s' is empty", path);
    goto wipe;
  }
  s = rg_control_secret_from_text(buf, have, out);
wipe:
  sodium_memzero(buf, sizeof buf);
close_fd:
  close(fd);
  return s;
}

rg_status_t rg_control_secret_load(const char *path, rg_control_secret_t *out) {
  RG_RETURN_IF_ERROR(rg__control_crypto_init());
  if (path) return load_file(path, out);
  const char *env = getenv("RIDGE_SECRET");
  if (!env)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "no shared secret: give --secret-file FILE or set RIDGE_SECRET");
  size_t n = trim_trailing_space(env, strlen(env));
  if (n == 0) return rg_status_make(RG_INVALID_ARGUMENT, "RIDGE_SECRET is set but empty");
  return rg_control_secret_from_text(env, n, out);
}

rg_status_t rg_control_secret_generate(char text[65], rg_control_secret_t *out) {
  RG_RETURN_IF_ERROR(rg__control_crypto_init());
  uint8_t raw[32];
  randombytes_buf(raw, sizeof raw);
  sodium_bin2hex(text, 65, raw, sizeof raw);
  sodium_memzero(raw, sizeof raw);
  return rg_control_secret_from_text(text, 64, out);
}
