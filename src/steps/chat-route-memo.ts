/**
 * The render addresses known to lack the Responses render route (`responses_via: auto`): after one
 * 404 there, and a chat render that worked instead, later Responses requests to that address go
 * straight to the chat route. Bounded: past `capacity` addresses the oldest is forgotten, and only
 * costs one more 404 when it is seen again.
 */
export const CHAT_ROUTE_MEMO_CAPACITY = 256;

export class ChatRouteMemo {
  private readonly addresses = new Set<string>();

  constructor(private readonly capacity = CHAT_ROUTE_MEMO_CAPACITY) {}

  usesChat(address: string): boolean {
    return this.addresses.has(address);
  }

  rememberChat(address: string): void {
    if (this.addresses.has(address)) return;
    if (this.addresses.size >= this.capacity) {
      const oldest = this.addresses.values().next();
      if (!oldest.done) this.addresses.delete(oldest.value);
    }
    this.addresses.add(address);
  }

  get size(): number {
    return this.addresses.size;
  }
}
