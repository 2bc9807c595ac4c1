/*
 * cloud_types.c - the GPU instance types the burst knows: what each
 * holds and its published on-demand price (and, for GCP, its spot
 * price: Google publishes a list, changed at most once a month, instead
 * of a market).
 *
 * Prices are AWS's on-demand list for Linux in us-east-1 (USD an hour,
 * as published in 2024); other regions and later lists differ, which is
 * why a cloud account may carry its own "prices" and why spot prices are
 * asked of the provider at launch time (cloud.h, spot_price).  GCP's
 * are Compute Engine's list for us-central1 (on-demand and spot, USD an
 * hour, GPUs included, as recorded in 2026; approximate, and an account's
 * "prices" override the on-demand side).  Azure's are its pay-as-you-go
 * list for eastus, Linux, and spot prices as recorded in 2026 (Azure's
 * spot prices move with capacity: approximate).  Naver Cloud's are its
 * VPC GPU server products (the NVIDIA T4 line of its KR region) with
 * estimated prices only (Naver lists them in won, and its list could not
 * be read when these were written): a Naver account should carry its own
 * "prices" (cnlab cloud add naver --prices).  Naver sells no spot
 * servers.  The A10G
 * of the g5 family is listed as the catalog's A10 (the same chip, 24 GB).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/cloud.h"

static const struct cnl_cloud_type types[] = {
    {"aws", "p5.48xlarge", "H100-80GB-SXM", 8, 192, 2048, 98.32, 0},
    {"aws", "p4de.24xlarge", "A100-80GB", 8, 96, 1152, 40.9657, 0},
    {"aws", "p4d.24xlarge", "A100-40GB", 8, 96, 1152, 32.7726, 0},
    {"aws", "p3dn.24xlarge", "V100-32GB", 8, 96, 768, 31.212, 0},
    {"aws", "p3.8xlarge", "V100-16GB", 4, 32, 244, 12.24, 0},
    {"aws", "p3.2xlarge", "V100-16GB", 1, 8, 61, 3.06, 0},
    {"aws", "g6e.xlarge", "L40S", 1, 4, 32, 1.861, 0},
    {"aws", "g6e.12xlarge", "L40S", 4, 48, 384, 10.493, 0},
    {"aws", "g6.xlarge", "L4", 1, 4, 16, 0.8048, 0},
    {"aws", "g6.12xlarge", "L4", 4, 48, 192, 4.6016, 0},
    {"aws", "g5.xlarge", "A10", 1, 4, 16, 1.006, 0},
    {"aws", "g5.2xlarge", "A10", 1, 8, 32, 1.212, 0},
    {"aws", "g5.12xlarge", "A10", 4, 48, 192, 5.672, 0},
    {"aws", "g5.48xlarge", "A10", 8, 192, 768, 16.288, 0},
    {"aws", "g4dn.xlarge", "T4", 1, 4, 16, 0.526, 0},
    {"aws", "g4dn.12xlarge", "T4", 4, 48, 192, 3.912, 0},
    {"gcp", "a3-highgpu-8g", "H100-80GB-SXM", 8, 208, 1872, 88.25, 26.48},
    {"gcp", "a2-ultragpu-8g", "A100-80GB", 8, 96, 1360, 40.55, 12.57},
    {"gcp", "a2-ultragpu-1g", "A100-80GB", 1, 12, 170, 5.07, 1.57},
    {"gcp", "a2-highgpu-8g", "A100-40GB", 8, 96, 680, 29.39, 8.82},
    {"gcp", "a2-highgpu-1g", "A100-40GB", 1, 12, 85, 3.67, 1.10},
    {"gcp", "g2-standard-48", "L4", 4, 48, 192, 4.00, 1.26},
    {"gcp", "g2-standard-4", "L4", 1, 4, 16, 0.71, 0.22},
    {"azure", "Standard_ND96isr_H100_v5", "H100-80GB-SXM", 8, 96, 1900, 98.32,
     39.33},
    {"azure", "Standard_NC96ads_A100_v4", "A100-80GB", 4, 96, 880, 14.69, 5.88},
    {"azure", "Standard_NC24ads_A100_v4", "A100-80GB", 1, 24, 220, 3.67, 1.47},
    {"azure", "Standard_ND96asr_v4", "A100-40GB", 8, 96, 900, 27.20, 10.88},
    {"azure", "Standard_NV36ads_A10_v5", "A10", 1, 36, 440, 3.20, 1.28},
    {"azure", "Standard_NC64as_T4_v3", "T4", 4, 64, 440, 4.35, 1.74},
    {"azure", "Standard_NC4as_T4_v3", "T4", 1, 4, 28, 0.526, 0.21},
    {"naver", "SVR.VSVR.GPU.T4.G001.C004.M020.NET.SSD.B050.G001", "T4", 1, 4,
     20, 0.82, 0},
    {"naver", "SVR.VSVR.GPU.T4.G001.C008.M040.NET.SSD.B050.G001", "T4", 1, 8,
     40, 1.02, 0},
    {"naver", "SVR.VSVR.GPU.T4.G001.C016.M080.NET.SSD.B050.G001", "T4", 1, 16,
     80, 1.42, 0},
    {"naver", "SVR.VSVR.GPU.T4.G002.C008.M040.NET.SSD.B050.G001", "T4", 2, 8,
     40, 1.64, 0},
    {"naver", "SVR.VSVR.GPU.T4.G002.C016.M080.NET.SSD.B050.G001", "T4", 2, 16,
     80, 2.04, 0},
    {"naver", "SVR.VSVR.GPU.T4.G002.C032.M160.NET.SSD.B050.G001", "T4", 2, 32,
     160, 2.84, 0},
};

const struct cnl_cloud_type *cnl_cloud_type_find(const char *provider,
                                                 const char *name)
{
	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
		if (strcmp(types[i].provider, provider) == 0 &&
		    strcmp(types[i].name, name) == 0)
			return &types[i];
	return NULL;
}

int cnl_cloud_errno(enum cnl_cloud_fail k)
{
	switch (k) {
	case CNL_CLOUD_CAPACITY:
	case CNL_CLOUD_THROTTLED:
		return -EAGAIN;
	case CNL_CLOUD_UNAVAILABLE:
		return -EIO;
	case CNL_CLOUD_AUTH:
		return -EACCES;
	case CNL_CLOUD_INVALID:
		return -EINVAL;
	default:
		return -EPROTO;
	}
}

void cnl_cloud_backoff(long *wait_ms, unsigned *seed)
{
	/* Full jitter: between half the wait and the whole. */
	long ms =
	    *wait_ms / 2 + (long)(rand_r(seed) % (unsigned)(*wait_ms / 2 + 1));
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
	*wait_ms = *wait_ms * 2 > CNL_CLOUD_BACKOFF_MAX_MS
	               ? CNL_CLOUD_BACKOFF_MAX_MS
	               : *wait_ms * 2;
}

int cnl_cloud_listed_spot_price(const char *provider, const char *type,
                                double *ret, struct cnl_cloud_error *e)
{
	const struct cnl_cloud_type *t = cnl_cloud_type_find(provider, type);

	memset(e, 0, sizeof(*e));
	if (!t || t->spot_h <= 0) {
		e->kind = CNL_CLOUD_INVALID;
		snprintf(e->message, sizeof(e->message),
		         "no listed spot price for %.64s", type);
		return -ENOENT;
	}
	*ret = t->spot_h;
	return 0;
}
