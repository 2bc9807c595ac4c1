/*
 * image.h - the node-local image store's collector, apart from the agent
 * (image.c has the store's layout and the rest).
 */
#ifndef CNL_AGENT_IMAGE_H
#define CNL_AGENT_IMAGE_H

#include <stddef.h>
#include <stdint.h>

/*
 * cnl_images_collect - in the image store @store (<work_dir>/images),
 * delete each unpacked image that is not one of @in_use (@n manifest
 * digests in hex: the images the node's workloads run) and whose last
 * start is @keep_s seconds ago or more, then every blob that no remaining
 * image names.  0; -EBUSY while a fetch or an unpack holds the store
 * (nothing is done: another time); -errno when there is no store.
 */
int cnl_images_collect(const char *store, int64_t keep_s,
                       const char *const *in_use, size_t n);

#endif /* CNL_AGENT_IMAGE_H */
