/*
 * cloud.h - cloud providers behind one small interface (issue 23: the
 * burst-out provisions real cloud GPUs through it).
 *
 * A provider launches N instances of one type in one market (on-demand
 * or spot), tagged, with the user data that starts cnlab-agent and its
 * one-time join token; describes instances (their state, and whether a
 * spot interruption ends them); and terminates them.  Each is an ops
 * table (the Slurm habit: one wrapper, plugins behind it); AWS EC2 is the
 * first (cloud_aws.c).
 *
 * Failures come back classified, for the burst policy to decide what to
 * do next without knowing a provider's error codes:
 *
 *   CAPACITY     the provider has none of this type in this market now
 *                (EC2's InsufficientInstanceCapacity): try the next type
 *                or market;
 *   THROTTLED    its rate limit, still after the plugin's retries;
 *   UNAVAILABLE  no answer, time-outs or 5xx, still after the retries:
 *                a provider outage;
 *   AUTH         the credentials were refused: nothing will work until
 *                an operator fixes them;
 *   INVALID      the request was refused (an unknown image or type);
 *   PROTOCOL     an answer that cannot be read.
 *
 * The plugins retry THROTTLED and UNAVAILABLE with exponential back-off
 * and jitter; a launch carries a client token, so that a retry after an
 * answer that never came launches nothing twice.  Credentials are held
 * in memory only, never logged and never put in an error.
 */
#ifndef CNL_SERVER_CLOUD_H
#define CNL_SERVER_CLOUD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum cnl_cloud_market { CNL_CLOUD_ON_DEMAND, CNL_CLOUD_SPOT };

enum cnl_cloud_fail {
	CNL_CLOUD_OK,
	CNL_CLOUD_CAPACITY,
	CNL_CLOUD_THROTTLED,
	CNL_CLOUD_UNAVAILABLE,
	CNL_CLOUD_AUTH,
	CNL_CLOUD_INVALID,
	CNL_CLOUD_PROTOCOL,
};

/* "capacity", "throttled", ... ("ok" for CNL_CLOUD_OK). */
const char *cnl_cloud_fail_name(enum cnl_cloud_fail f);

struct cnl_cloud_error {
	enum cnl_cloud_fail kind;
	char code[64];     /* the provider's ("InsufficientInstanceCapacity") */
	char message[512]; /* the provider's words, or ours */
	long http_status;  /* of the last answer; 0: none came */
	int attempts;      /* calls made, retries included */
};

struct cnl_cloud_tag {
	const char *key;
	const char *value;
};

struct cnl_cloud_launch {
	const char *instance_type; /* "p5.48xlarge" */
	enum cnl_cloud_market market;
	int count;             /* 1..CNL_CLOUD_LAUNCH_MAX, all or none */
	const char *image;     /* the machine image (AMI) */
	const char *subnet;    /* NULL: the account's default */
	const char *user_data; /* the boot script, plain; NULL: none */
	const struct cnl_cloud_tag *tags;
	size_t ntags;
	const char *client_token; /* idempotency; required */
};

#define CNL_CLOUD_LAUNCH_MAX 100
#define CNL_CLOUD_ID_MAX     64

struct cnl_cloud_instance {
	char id[CNL_CLOUD_ID_MAX];
	char type[64];
	char state[32]; /* pending, running, shutting-down, terminated, ... */
	char zone[64];
	char private_ip[64];
	bool spot;
	/* A spot interruption ends it (or ended it). */
	bool interrupted;
	char reason[256]; /* the provider's state reason, "" when none */
	char record[64];  /* its "cnlab:record" tag (the burst's record of
	                   * it), "" without */
};

struct cnl_cloud;

struct cnl_cloud_ops {
	const char *name; /* "aws" */
	/* Launch @l: 0 with the instances in @ret (at most @cap; *@ret_n
	 * of them), or -EAGAIN/-EIO/-EACCES/-EINVAL/-EPROTO with @err; on
	 * -EPROTO *@ret_n may be non-zero: instances the answer did list,
	 * launched, for the caller to terminate. */
	int (*provision)(struct cnl_cloud *c, const struct cnl_cloud_launch *l,
	                 struct cnl_cloud_instance *ret, size_t cap,
	                 size_t *ret_n, struct cnl_cloud_error *err);
	/* The instances of @ids (or, with @n 0, every instance of the
	 * account that CNLab launched: tagged cnlab:record), as provision()
	 * answers. */
	int (*describe)(struct cnl_cloud *c, const char *const *ids, size_t n,
	                struct cnl_cloud_instance *ret, size_t cap,
	                size_t *ret_n, struct cnl_cloud_error *err);
	/* Terminate @ids (n >= 1); terminating one already gone is not an
	 * error. */
	int (*terminate)(struct cnl_cloud *c, const char *const *ids, size_t n,
	                 struct cnl_cloud_error *err);
	/* The price list's spot side: the current spot price of @type in
	 * USD an hour (on-demand prices are published lists: the table
	 * below, which an account may override). */
	int (*spot_price)(struct cnl_cloud *c, const char *type, double *ret,
	                  struct cnl_cloud_error *err);
	void (*free)(struct cnl_cloud *c);
};

struct cnl_cloud {
	const struct cnl_cloud_ops *ops;
};

/* cnl_cloud_free - NULL-safe. */
void cnl_cloud_free(struct cnl_cloud *c);

/* The errno of a failure's kind (-EAGAIN for CAPACITY and THROTTLED,
 * -EIO, -EACCES, -EINVAL, -EPROTO), for the plugins. */
int cnl_cloud_errno(enum cnl_cloud_fail k);

#define CNL_CLOUD_BACKOFF_MAX_MS 20000

/* Sleep before a plugin's retry: between half of *@wait_ms and all of it
 * (full jitter, from @seed), then double *@wait_ms up to
 * CNL_CLOUD_BACKOFF_MAX_MS. */
void cnl_cloud_backoff(long *wait_ms, unsigned *seed);

/*
 * Instance types (cloud_types.c): what one holds, as the catalog names
 * its GPUs, and its published on-demand price (USD an hour, Linux, the
 * provider's list for its first region; an account's "prices" override
 * it).  NULL when @provider has no type @name in the table.
 */
struct cnl_cloud_type {
	const char *provider;
	const char *name;  /* "p5.48xlarge" */
	const char *model; /* catalog name: "H100-80GB-SXM" */
	int gpus;
	int vcpus;
	int mem_gib;
	double on_demand_h;
	/* The spot price, where the provider publishes a list rather than
	 * a market (GCP: changed at most once a month); 0: ask spot_price. */
	double spot_h;
};
const struct cnl_cloud_type *cnl_cloud_type_find(const char *provider,
                                                 const char *name);
/* cnl_cloud_listed_spot_price - the spot price of @type in the table
 * (providers that publish a list, not a market): 0, or -ENOENT with @e
 * when it has none. */
int cnl_cloud_listed_spot_price(const char *provider, const char *type,
                                double *ret, struct cnl_cloud_error *e);

/* AWS EC2 (cloud_aws.c): the Query API, signed with SigV4. */
struct cnl_cloud_aws_config {
	const char *region;   /* "us-east-1" */
	const char *endpoint; /* NULL: https://ec2.REGION.amazonaws.com */
	const char *access_key;
	const char *secret_key;
	const char *session_token; /* temporary credentials; NULL: none */
	const char *cafile;        /* NULL: the system's CAs */
	int max_attempts;          /* per call, retries included; 0: 5 */
	long backoff_ms;           /* the first retry's wait; 0: 200 */
	long timeout_ms;           /* per attempt; 0: 20 s */
};

/*
 * cnl_cloud_aws_new - an EC2 provider for @cfg in *@ret.  0, or -EINVAL
 * with @err naming the field (no region, no key, an endpoint that is not
 * http(s)://).
 */
int cnl_cloud_aws_new(const struct cnl_cloud_aws_config *cfg,
                      struct cnl_cloud **ret, char *err, size_t errlen);

/*
 * GCP Compute Engine (cloud_gcp.c): the Compute REST API with the access
 * tokens a service account's key earns (a JWT assertion, RS256).  Its
 * instance ids are instance names; "region" is the zone instances are
 * made in.
 */
struct cnl_cloud_gcp_config {
	const char *project;      /* "my-project" */
	const char *zone;         /* "us-central1-a" */
	const char *endpoint;     /* NULL: https://compute.googleapis.com */
	const char *client_email; /* the service account */
	const char *private_key;  /* its RSA key, PEM */
	const char *token_uri; /* NULL: https://oauth2.googleapis.com/token */
	const char *cafile;    /* NULL: the system's CAs */
	int max_attempts;      /* per call, retries included; 0: 5 */
	long backoff_ms;       /* the first retry's wait; 0: 200 */
	long timeout_ms;       /* per attempt; 0: 20 s */
};

/*
 * cnl_cloud_gcp_new - a Compute Engine provider for @cfg in *@ret.  0, or
 * -EINVAL with @err naming the field.
 */
int cnl_cloud_gcp_new(const struct cnl_cloud_gcp_config *cfg,
                      struct cnl_cloud **ret, char *err, size_t errlen);

/*
 * Microsoft Azure (cloud_azure.c): virtual machines through Azure
 * Resource Manager, with the access tokens a service principal's client
 * secret earns.  Instance ids are VM names; VMs are made in
 * @resource_group, in @location, on @subnet.
 */
struct cnl_cloud_azure_config {
	const char *subscription;   /* the subscription id */
	const char *location;       /* "eastus" */
	const char *resource_group; /* where the VMs are made */
	const char *subnet;         /* the subnet's resource id */
	const char *endpoint;       /* NULL: https://management.azure.com */
	const char *tenant_id;
	const char *client_id;
	const char *client_secret;
	/* NULL: https://login.microsoftonline.com/TENANT/oauth2/v2.0/token */
	const char *token_uri;
	const char *cafile;
	int max_attempts;
	long backoff_ms;
	long timeout_ms;
};

int cnl_cloud_azure_new(const struct cnl_cloud_azure_config *cfg,
                        struct cnl_cloud **ret, char *err, size_t errlen);

/*
 * NAVER Cloud Platform (cloud_naver.c): servers of a VPC through the
 * Server (VPC) API, each request signed with the account's API key
 * (HMAC-SHA256).  Instance ids are server instance numbers; servers are
 * made in @vpc_no on @subnet_no; Naver sells no spot servers.
 */
struct cnl_cloud_naver_config {
	const char *region;    /* "KR" */
	const char *vpc_no;    /* the VPC's number */
	const char *subnet_no; /* the subnet's number */
	const char *endpoint;  /* NULL: https://ncloud.apigw.ntruss.com */
	const char *access_key;
	const char *secret_key;
	const char *cafile;
	int max_attempts;
	long backoff_ms;
	long timeout_ms;
};

int cnl_cloud_naver_new(const struct cnl_cloud_naver_config *cfg,
                        struct cnl_cloud **ret, char *err, size_t errlen);

/*
 * cnl_cloud_naver_signature - x-ncp-apigw-signature-v2 of @method
 * @path (with its query) at @timestamp (milliseconds, as sent) for
 * @access_key, keyed with @secret_key, in @out: 0, or -EINVAL.
 */
int cnl_cloud_naver_signature(const char *method, const char *path,
                              const char *timestamp, const char *access_key,
                              const char *secret_key, char out[64]);

/*
 * KT Cloud (cloud_kt.c): virtual machines through its server API, which
 * is Apache CloudStack's (each request signed HMAC-SHA1 with the
 * account's secret key).  Instance ids are VM ids; VMs are made in @zone,
 * on @network where set; instance types are service offering ids (a KT
 * account declares them: cnlab cloud add kt --type-specs); no spot.
 */
struct cnl_cloud_kt_config {
	const char *zone;     /* the zone's id */
	const char *network;  /* NULL: the zone's default */
	const char *endpoint; /* NULL: https://api.ucloudbiz.olleh.com/
	                       * server/v1/client/api */
	const char *api_key;
	const char *secret_key;
	const char *cafile;
	int max_attempts;
	long backoff_ms;
	long timeout_ms;
};

int cnl_cloud_kt_new(const struct cnl_cloud_kt_config *cfg,
                     struct cnl_cloud **ret, char *err, size_t errlen);

/*
 * cnl_cloud_kt_sign - CloudStack's signature of the request of the @n
 * parameters @names = @values (apiKey and command among them), keyed with
 * @secret_key, in @out (base64, before it is URL-encoded): 0, or -EINVAL.
 */
int cnl_cloud_kt_sign(const char *const *names, const char *const *values,
                      size_t n, const char *secret_key, char out[64]);

/*
 * cnl_cloud_gcp_assertion - the signed JWT (RS256) that @email presents
 * at the token URI @aud at @now_s, in *@ret (free()).  -EINVAL when
 * @private_key_pem is not an RSA private key.
 */
int cnl_cloud_gcp_assertion(const char *email, const char *private_key_pem,
                            const char *aud, int64_t now_s, char **ret);

#endif
