// Package ldcache reads, merges and writes glibc's /etc/ld.so.cache.
//
// Driver discovery parses a driver root's cache to find libraries such as
// libcuda.so.1 ([Parse], [Cache.Lookup]). The hook adds the driver's
// libraries to a container's existing cache ([Merge]: the bytes of
// [Parse], [Cache.Add] and [Cache.MarshalKeepingStrings], without decoding
// each entry) instead of rerunning ldconfig over the whole image; it falls
// back to ldconfig when [Merge] returns an error wrapping [ErrFormat].
//
// The dynamic loader binary-searches the entries, so their order is part of
// the format: entries sort in descending order of glibc's _dl_cache_libcmp
// (digit runs compare as numbers), then by descending flags, glibc-hwcaps
// entries first, then by descending hwcap and OS version, exactly as
// ldconfig's add_to_cache keeps its list. [Cache.Add] inserts where
// ldconfig would, and [Cache.Marshal] writes the "glibc-ld.so.cache1.1"
// format byte for byte as glibc 2.36's ldconfig does (header, entries,
// tail-merged string table, extension directory with the generator string
// and the glibc-hwcaps section), so parsing a cache that ldconfig wrote and
// marshalling it again gives back the same bytes.
//
// Parse reads the new format alone (glibc 2.32 and later write only that)
// and the new format appended to the old "ld.so-1.7.0" one (ldconfig -c
// compat, the default before 2.32). The old format alone, or a big-endian
// cache, is refused with ErrFormat, as is anything truncated or pointing
// outside the file.
package ldcache
