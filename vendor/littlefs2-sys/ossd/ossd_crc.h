/*
 * ossd: littlefs's CRC-32 (reflected polynomial 0xedb88320, no pre- or post-inversion, as
 * lfs_util.c computes it), eight bytes a step with tables build.rs generates. lfs_util.c's
 * version takes two 16-entry table look-ups per byte; littlefs checksums every metadata block
 * it reads, and on ossd's device model that was a fifth of a LittleFS PostMark run's CPU time
 * (docs/PERFORMANCE.md). build.rs defines LFS_CRC to call this, and leaves lfs_util.c out.
 */
#ifndef OSSD_CRC_H
#define OSSD_CRC_H
#include <stddef.h>
#include <stdint.h>
uint32_t ossd_lfs_crc(uint32_t crc, const void *buffer, size_t size);
#endif
