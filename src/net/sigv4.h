/*
 * sigv4.h - AWS Signature Version 4: the signature of an HTTP request to
 * an AWS API (issue 23: the EC2 calls of the cloud burst-out).
 *
 * A request is signed in four steps, each a pure function of the request
 * and the credentials, so that each can be checked against AWS's
 * published test suite (tests/data/sigv4/):
 *
 *   1. the canonical request: the method, the canonical path (dot
 *      segments and empty segments removed, each byte outside
 *      A-Za-z0-9-._~ percent-encoded in upper-case hex), the canonical
 *      query (each name and value decoded, then encoded as above, the
 *      pairs sorted by name then value), the signed headers (names in
 *      lower case, sorted; values trimmed, runs of spaces made one, the
 *      values of a repeated name joined by commas in their order), their
 *      names, and the hex SHA-256 of the body;
 *   2. the string to sign: "AWS4-HMAC-SHA256", the request's
 *      X-Amz-Date, the credential scope (DATE/REGION/SERVICE/aws4_request)
 *      and the hex SHA-256 of the canonical request;
 *   3. the signing key: HMAC-SHA256 chained from "AWS4" + the secret key
 *      over the date, the region, the service and "aws4_request";
 *   4. the signature, hex HMAC-SHA256 of the string to sign under that
 *      key, and the Authorization header that carries it.
 *
 * Every header given is signed: the caller passes Host and X-Amz-Date
 * (the time of the signature, YYYYMMDDTHHMMSSZ in UTC: see
 * cnl_sigv4_amz_date()), and X-Amz-Security-Token when the credentials
 * are temporary.  The path is given as it is meant, not percent-encoded:
 * "/example space/" is signed as "/example%20space/".  S3's variant (no
 * path normalisation, unsigned payloads) is not implemented: CNLab signs
 * EC2 Query API calls, whose path is "/".
 *
 * Nothing here logs, and no error names a secret: the secret key goes
 * only into the HMAC.
 */
#ifndef CNL_NET_SIGV4_H
#define CNL_NET_SIGV4_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Longest method, path, query, header name or value, body, credential
 * field accepted: larger input is refused (-CNL_ESIZE), not truncated. */
#define CNL_SIGV4_FIELD_MAX   (16 * 1024)
#define CNL_SIGV4_BODY_MAX    (8 * 1024 * 1024)
#define CNL_SIGV4_HEADERS_MAX 64

/* "YYYYMMDDTHHMMSSZ" and its NUL. */
#define CNL_SIGV4_DATE_LEN 17

struct cnl_sigv4_header {
	const char *name;
	const char *value;
};

struct cnl_sigv4_request {
	const char *method; /* "GET", "POST": an HTTP token */
	const char *path;   /* "/", not percent-encoded */
	const char *query;  /* after the "?", or NULL: "Action=...&..." */
	const struct cnl_sigv4_header *headers; /* all signed */
	size_t nheaders;
	const void *body; /* NULL with body_len 0: empty */
	size_t body_len;
};

struct cnl_sigv4_credentials {
	const char *access_key; /* the key id, "AKID..." */
	const char *secret_key;
	const char *region;  /* "us-east-1" */
	const char *service; /* "ec2" */
};

/* The four steps' results; each string malloc'ed (cnl_sigv4_done()). */
struct cnl_sigv4 {
	char *canonical;      /* step 1 */
	char *string_to_sign; /* step 2 */
	char *signature;      /* step 4: 64 hex digits */
	char *authorization;  /* the Authorization header's value */
};

/*
 * cnl_sigv4_sign - sign @req with @cred into @ret (cleared first).
 * Returns 0; or -EINVAL with @err naming the field (a missing Host or
 * X-Amz-Date, a date not of the form YYYYMMDDTHHMMSSZ, a header name that
 * is not an HTTP token, a value with a control character such as CR or
 * LF, a bad percent-escape in the query, an empty or "/"-holding
 * credential field), or -CNL_ESIZE past a limit above.  @ret is then
 * empty (nothing to free).
 */
int cnl_sigv4_sign(const struct cnl_sigv4_request *req,
                   const struct cnl_sigv4_credentials *cred,
                   struct cnl_sigv4 *ret, char *err, size_t errlen);

/* Free what cnl_sigv4_sign() made; NULL-safe, and safe twice. */
void cnl_sigv4_done(struct cnl_sigv4 *s);

/*
 * cnl_sigv4_signing_key - step 3 alone: the 32-byte key of @secret for
 * @date (YYYYMMDD), @region and @service, into @ret_key.  0 or -EINVAL.
 */
int cnl_sigv4_signing_key(const char *secret, const char *date,
                          const char *region, const char *service,
                          unsigned char ret_key[32]);

/*
 * cnl_sigv4_amz_date - @unix_s (seconds since the epoch) as an
 * X-Amz-Date, "YYYYMMDDTHHMMSSZ" in UTC, into @ret.  0, or -EINVAL for a
 * time before 1970 or past 9999.
 */
int cnl_sigv4_amz_date(int64_t unix_s, char ret[CNL_SIGV4_DATE_LEN]);

/*
 * cnl_sigv4_escape - @s percent-encoded as SigV4 wants a query name or
 * value (every byte outside A-Za-z0-9-._~ as %XX), malloc'ed: for
 * building a query that signs as it is sent.
 */
char *cnl_sigv4_escape(const char *s);

#endif
