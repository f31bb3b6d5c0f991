/* The token and its HMAC-SHA256 proof (auth.c). */
#ifndef PV_AUTH_H
#define PV_AUTH_H

#include "pv_base.h"

const char *pv_token(void);                 /* auth.c */
int pv_hmac_hex(const char *token, const void *nonce, size_t nonce_len, char out[65]);

#endif
