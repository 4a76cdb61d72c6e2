/* paykey.c -- the payment notices' key and signature check (paykey.h). */
#include "order/paykey.h"

#include <stdio.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "core/config.h"
#include "core/datadir.h"
#include "core/rnd.h"

static char key[256];
static size_t keylen;

int paykey_init(const config_t *cfg, int embedded, char *err, size_t errlen)
{
    if (cfg->pay_key[0]) {
        if (strlen(cfg->pay_key) < PAYKEY_MIN) {
            snprintf(err, errlen, "the pay key is too short (%zu characters): use at least %d "
                     "(--pay-key-file)", strlen(cfg->pay_key), PAYKEY_MIN);
            return -1;
        }
        snprintf(key, sizeof key, "%s", cfg->pay_key);
        keylen = strlen(key);
        return 0;
    }
    if (!embedded)
        return 0;   /* no key: notices are refused */
    char buf[sizeof key];
    int rc = datadir_read_secret(cfg->data_dir, "pay-key", buf, sizeof buf, err, errlen);
    if (rc < 0)
        return -1;
    if (rc == 1) {
        if (strlen(buf) < PAYKEY_MIN) {
            snprintf(err, errlen, "%s/pay-key holds no key (fewer than %d characters): remove "
                     "it to have a new one made", cfg->data_dir, PAYKEY_MIN);
            return -1;
        }
        memcpy(key, buf, strlen(buf) + 1);
    } else {
        if (rnd_hex(key, 32) != 0) {
            snprintf(err, errlen, "random number generator unavailable");
            return -1;
        }
        if (datadir_write_secret(cfg->data_dir, "pay-key", key, err, errlen) < 0)
            return -1;
    }
    keylen = strlen(key);
    return 0;
}

int paykey_verify(const char *body, size_t len, const char *sig, size_t siglen)
{
    if (keylen == 0)
        return -1;
    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned int maclen = 0;
    if (HMAC(EVP_sha256(), key, (int)keylen, (const unsigned char *)body, len, mac, &maclen) ==
        NULL)
        return 0;
    char hex[2 * EVP_MAX_MD_SIZE + 1];
    for (unsigned int i = 0; i < maclen; i++)
        snprintf(hex + 2 * i, 3, "%02x", mac[i]);
    if (siglen != 2 * (size_t)maclen)
        return 0;
    return CRYPTO_memcmp(hex, sig, siglen) == 0;
}
