import { BlockList, isIP } from 'node:net';

/**
 * Whether the peer at `address` is one of the proxies the service trusts, as Express's `trust
 * proxy` function takes it (the hop number is not needed: every trusted hop is trusted alike).
 */
export type TrustProxy = (address: string | undefined, hop?: number) => boolean;

/** `address` or `address/prefix`, IPv4 or IPv6; undefined when the entry is neither. */
export function parseProxyEntry(
  entry: string,
): { address: string; prefix: number; family: 'ipv4' | 'ipv6' } | undefined {
  const [address = '', prefixText, extra] = entry.split('/');
  const version = isIP(address);
  if (version === 0 || extra !== undefined) return undefined;
  const family = version === 4 ? 'ipv4' : 'ipv6';
  const most = version === 4 ? 32 : 128;
  if (prefixText === undefined) return { address, prefix: most, family };
  if (!/^(?:0|[1-9][0-9]{0,2})$/.test(prefixText) || Number(prefixText) > most) return undefined;
  return { address, prefix: Number(prefixText), family };
}

/** An IPv4 peer on a dual-stack listener shows as `::ffff:a.b.c.d`: it is compared as IPv4. */
const MAPPED_V4 = /^::ffff:(\d{1,3}(?:\.\d{1,3}){3})$/i;

/**
 * The trust function of TRUSTED_PROXIES' entries (settings.ts has checked them), on Node's own
 * address matcher. An empty list trusts nobody: the peer is the client, whatever it sends.
 */
export function trustProxies(entries: readonly string[]): TrustProxy {
  if (entries.length === 0) return () => false;
  const list = new BlockList();
  for (const entry of entries) {
    const parsed = parseProxyEntry(entry);
    if (!parsed) throw new Error(`not an address or CIDR: ${entry}`);
    list.addSubnet(parsed.address, parsed.prefix, parsed.family);
  }
  return (address) => {
    if (address === undefined) return false;
    const mapped = MAPPED_V4.exec(address)?.[1];
    if (mapped !== undefined) return list.check(mapped, 'ipv4');
    const version = isIP(address);
    return version !== 0 && list.check(address, version === 4 ? 'ipv4' : 'ipv6');
  };
}
