/*
 * errors.h - CNLab's error codes, shared by every binary and library.
 *
 * Convention (after libuv): a function returns an int that is >= 0 on success
 * and negative on failure.  A failure is either a negated errno value
 * (-ENOMEM, -EINVAL, ...) or a negated CNL_E* code from the list below.  The
 * CNL_E* codes start at CNL_EBASE, far above any errno, so the two ranges
 * never collide; cnl_strerror() explains either kind.
 *
 * The list is an X-macro: one row per code gives its name and its message,
 * and both the enum and cnl_strerror()'s table are generated from it, so a
 * code cannot exist without an explanation.
 */
#ifndef CNLAB_ERRORS_H
#define CNLAB_ERRORS_H

#define CNL_EBASE 10000

/* X(name, message) */
#define CNL_ERROR_LIST(X)                                                    \
	X(CNL_EBLOCKS, "block count out of range (1..100)")                  \
	X(CNL_EPROFILE, "unknown MIG profile for this GPU type")             \
	X(CNL_ENOMIG, "GPU type does not support MIG")                       \
	X(CNL_ESIZE, "negative or oversized resource amount")                \
	X(CNL_EGPUTYPE, "unknown GPU type")                                  \
	X(CNL_ENOSPACE, "no capacity for the request")                       \
	X(CNL_ENOALLOC, "no such allocation")                                \
	X(CNL_EKIND, "operation not supported for this kind of allocation")  \
	X(CNL_ENODE, "no such node")                                         \
	X(CNL_ENODESTATE, "node is not accepting work in its current state") \
	X(CNL_EGANG, "gang size out of range for a node")                    \
	X(CNL_ETENANT, "request would cross a tenant boundary")              \
	X(CNL_EPARSE, "malformed input")                                     \
	X(CNL_EFIELD, "unknown or wrongly typed field")                      \
	X(CNL_EDUP, "name already defined")                                  \
	X(CNL_ELIMIT, "a fixed limit was exceeded")                          \
	X(CNL_ECONFIG, "invalid configuration value")                        \
	X(CNL_ENOTFOUND, "not found")                                        \
	X(CNL_EDEADLINE, "deadline cannot be met")                           \
	X(CNL_EAUTH, "authentication failed")                                \
	X(CNL_ECORRUPT, "stored data failed verification")                   \
	X(CNL_EFENCED, "stale fencing epoch: the work was moved")            \
	X(CNL_EQUOTA, "quota exhausted")                                     \
	X(CNL_ESTATE, "illegal state transition")

enum cnl_error_code {
	CNL_EBASE_ = CNL_EBASE,
#define CNL_ERROR_ENUM(name, msg) name,
	CNL_ERROR_LIST(CNL_ERROR_ENUM)
#undef CNL_ERROR_ENUM
	    CNL_ELAST_
};

/*
 * cnl_strerror - a human-readable message for any return code of CNLab:
 * 0 ("success"), a negated errno, or a negated CNL_E* code.  Never NULL;
 * an unknown code yields "unknown error".  The string is static.
 */
const char *cnl_strerror(int code);

/* cnl_errname - the symbolic name ("CNL_ENOSPACE", "ENOMEM") or "UNKNOWN". */
const char *cnl_errname(int code);

#endif /* CNLAB_ERRORS_H */
