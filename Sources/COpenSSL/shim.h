// OpenSSL's libcrypto (Debian libssl-dev): SHA-1 for the WebSocket handshake (RFC 6455 requires
// it and libsodium has none) and RSA/ECDSA signatures. Only MoonbaseCrypto imports this module.
#include <openssl/sha.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/err.h>
#include <openssl/ecdsa.h>
#include <openssl/bn.h>
#include <openssl/bio.h>
