/**
 * xxHash64, the hash Envoy uses for consistent hashing (`HashUtil::xxHash64`: request hash keys,
 * ring entries, maglev permutations, generated cookie values), from the `xxhash-wasm` package
 * (loaded once at module load).
 */
import xxhash from 'xxhash-wasm';

const api = await xxhash();

/** xxHash64 of `input`'s UTF-8 bytes with `seed` (default 0), as an unsigned 64-bit bigint. */
export function xxHash64(input: string, seed?: bigint): bigint {
  return api.h64(input, seed);
}

/** Envoy's `Hex::uint64ToHex`: 16 lower-case hex digits, zero-padded. */
export function uint64ToHex(v: bigint): string {
  return v.toString(16).padStart(16, '0');
}
