/* Symbol lookup in one loaded object's own ELF tables (see ah_elf.h): pure memory reads, no
 * loader lock and no intercepted call, so it is safe inside the first dlsym of the process and
 * inside dl_iterate_phdr callbacks. */
#include <elf.h>
#include <stddef.h>

#include "ah_elf.h"

AH_EARLY int ah_elf_streq(const char *a, const char *b) {
  while (*a && *a == *b) a++, b++;
  return *a == *b;
}

AH_EARLY void *ah_elf_lookup(uintptr_t base, const ElfW(Dyn) * dyn, const char *name) {
  if (!dyn) return NULL;
  const ElfW(Sym) *symtab = NULL;
  const char *strtab = NULL;
  const uint32_t *gnu = NULL, *sysv = NULL;
  for (const ElfW(Dyn) *d = dyn; d->d_tag != DT_NULL; d++) {
    /* glibc relocates these entries to absolute addresses in the objects it loads (not the vDSO) */
    uintptr_t p = (uintptr_t)d->d_un.d_ptr;
    if (p < base) p += base;
    if (d->d_tag == DT_SYMTAB) symtab = (const ElfW(Sym) *)p;
    else if (d->d_tag == DT_STRTAB) strtab = (const char *)p;
    else if (d->d_tag == DT_GNU_HASH) gnu = (const uint32_t *)p;
    else if (d->d_tag == DT_HASH) sysv = (const uint32_t *)p;
  }
  if (!symtab || !strtab) return NULL;
  if (gnu) {
    uint32_t nbuckets = gnu[0], symoffset = gnu[1], bloom_size = gnu[2];
    const ElfW(Addr) *bloom = (const ElfW(Addr) *)(gnu + 4);
    const uint32_t *buckets = (const uint32_t *)(bloom + bloom_size), *chain = buckets + nbuckets;
    uint32_t h = 5381;
    for (const unsigned char *s = (const unsigned char *)name; *s; s++) h = h * 33 + *s;
    if (nbuckets == 0) return NULL;
    for (uint32_t i = buckets[h % nbuckets]; i >= symoffset && i != 0; i++) {
      uint32_t ch = chain[i - symoffset];
      const ElfW(Sym) *sym = &symtab[i];
      if ((ch | 1u) == (h | 1u) && sym->st_shndx != SHN_UNDEF && sym->st_value &&
          ah_elf_streq(strtab + sym->st_name, name))
        return (void *)(base + sym->st_value);
      if (ch & 1u) break;
    }
    return NULL;
  }
  if (sysv) {
    uint32_t nchain = sysv[1];
    for (uint32_t i = 0; i < nchain; i++) {
      const ElfW(Sym) *sym = &symtab[i];
      if (sym->st_shndx != SHN_UNDEF && sym->st_value && ah_elf_streq(strtab + sym->st_name, name))
        return (void *)(base + sym->st_value);
    }
  }
  return NULL;
}
