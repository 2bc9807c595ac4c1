/*
 * cloud_types.c - the GPU instance types the burst knows: what each
 * holds and its published on-demand price.
 *
 * Prices are AWS's on-demand list for Linux in us-east-1 (USD an hour,
 * as published in 2024); other regions and later lists differ, which is
 * why a cloud account may carry its own "prices" and why spot prices are
 * asked of the provider at launch time (cloud.h, spot_price).  The A10G
 * of the g5 family is listed as the catalog's A10 (the same chip, 24 GB).
 */
#include <string.h>

#include "server/cloud.h"

static const struct cnl_cloud_type types[] = {
    {"aws", "p5.48xlarge", "H100-80GB-SXM", 8, 192, 2048, 98.32},
    {"aws", "p4de.24xlarge", "A100-80GB", 8, 96, 1152, 40.9657},
    {"aws", "p4d.24xlarge", "A100-40GB", 8, 96, 1152, 32.7726},
    {"aws", "p3dn.24xlarge", "V100-32GB", 8, 96, 768, 31.212},
    {"aws", "p3.8xlarge", "V100-16GB", 4, 32, 244, 12.24},
    {"aws", "p3.2xlarge", "V100-16GB", 1, 8, 61, 3.06},
    {"aws", "g6e.xlarge", "L40S", 1, 4, 32, 1.861},
    {"aws", "g6e.12xlarge", "L40S", 4, 48, 384, 10.493},
    {"aws", "g6.xlarge", "L4", 1, 4, 16, 0.8048},
    {"aws", "g6.12xlarge", "L4", 4, 48, 192, 4.6016},
    {"aws", "g5.xlarge", "A10", 1, 4, 16, 1.006},
    {"aws", "g5.12xlarge", "A10", 4, 48, 192, 5.672},
    {"aws", "g5.48xlarge", "A10", 8, 192, 768, 16.288},
    {"aws", "g4dn.xlarge", "T4", 1, 4, 16, 0.526},
    {"aws", "g4dn.12xlarge", "T4", 4, 48, 192, 3.912},
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
