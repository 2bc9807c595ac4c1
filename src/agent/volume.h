/*
 * volume.h - a server's workspace as a volume of its own: a file system
 * of exactly the size the server asked for, so that a tenant who fills it
 * gets ENOSPC in its own workspace while the node's disk and every other
 * workload go on.
 *
 * A volume is a sparse image file (ext4, made by mkfs.ext4) that is
 * attached to a free loop device (autoclear: the device goes with the
 * last unmount) and mounted nosuid,nodev on the workspace folder.  The
 * image costs the node's disk only what the tenant wrote (and a few MiB
 * of metadata); the inode tables are never zeroed in the background
 * (noinit_itable), so an idle 50 GB volume stays a few MiB.
 *
 * Why not a project quota on the node's own file system: it needs the
 * operator to have made that file system with project quotas and to
 * mount it with prjquota (this platform's nodes and CI do not), a project
 * id per server kept in step with the tree, and it shares the node's
 * inodes and journal with the tenant.  An image works on any file system
 * the node has, gives ENOSPC (not EDQUOT) at the size, and goes with one
 * unlink.  Its limit: the images are sparse, so the sizes of all volumes
 * may add up to more than the node's disk (see docs/internals).
 *
 * Needs root.  Library code: no logging; every failure is a negative
 * errno with @err naming the file and the cause.
 */
#ifndef CNL_AGENT_VOLUME_H
#define CNL_AGENT_VOLUME_H

#include <stddef.h>
#include <stdint.h>

/* Room a new image needs on the node's disk beyond nothing at all: what
 * mkfs.ext4 writes (superblocks, bitmaps, the root folder), with room to
 * spare. */
#define CNL_VOLUME_MIN_FREE ((uint64_t)64 << 20)
/* The smallest volume mkfs.ext4 makes reliably with a journal. */
#define CNL_VOLUME_MIN_BYTES ((uint64_t)16 << 20)

/*
 * cnl_volume_create - make the image @image of @bytes bytes with the
 * program @mkfs (mkfs.ext4's path).  It is made as "@image.new" and renamed
 * into place once complete, so an image that exists is whole; on any
 * failure nothing is left.  An existing @image is kept as it is (0).
 * -ENOSPC with @err saying how much is free when the node's disk has less
 * than CNL_VOLUME_MIN_FREE, or when mkfs.ext4 ran out of room; -EFBIG
 * when @bytes is more than the whole disk.
 */
int cnl_volume_create(const char *image, uint64_t bytes, const char *mkfs,
                      char *err, size_t errlen);

/*
 * cnl_volume_mount - mount @image on the folder @dir (which must exist):
 * a free loop device with autoclear, ext4, nosuid, nodev, noatime,
 * noinit_itable.  Never a second device on one image (two file systems on
 * the same blocks): when a loop device already holds @image (its file
 * system still held by a mount namespace made while it was mounted, or
 * mounted elsewhere), that device's file system is mounted on @dir; when
 * it is mounted on @dir already (an agent restarted after the mount), 0
 * and nothing done.  @dir with something else mounted: -EBUSY.  No free
 * loop device: -ENOSPC with @err saying so.
 */
int cnl_volume_mount(const char *image, const char *dir, char *err,
                     size_t errlen);

/* cnl_volume_mounted - 1 when @dir is a mount point (its file system is
 * not its parent's), 0 when not, a negative errno when it cannot be
 * told (-ENOENT: no @dir). */
int cnl_volume_mounted(const char *dir);

/*
 * cnl_volume_unmount - unmount what is mounted on @dir (its loop device
 * goes with it); lazily when it is busy, so that it is gone from the
 * node's view at once and released when the last user lets go.  0 when
 * @dir was not a mount point.
 */
int cnl_volume_unmount(const char *dir);

/* cnl_volume_loop_of - the loop device ("/dev/loop3") that holds @image
 * into @ret_dev, 0; -ENOENT when none does. */
int cnl_volume_loop_of(const char *image, char *ret_dev, size_t len);

#endif /* CNL_AGENT_VOLUME_H */
