/**
 * Peers: who is on the other end of a request (Istio's `WorkloadMetadataObject`), how they are
 * described on the wire (`baggage`, `x-envoy-peer-metadata`, `istio-peer-exchange`) and the slots
 * that carry them between filters. The entry filters and other layers import.
 */
export { parseBaggage } from './baggage-parse.ts';
export { formatBaggage } from './baggage.ts';
export {
  DOWNSTREAM_PEER,
  EMPTY_PEER,
  REQUEST_DOWNSTREAM_PEER,
  TCP_UPSTREAM_PEER,
  UPSTREAM_PEER,
  downstreamPeerOf,
  peerFromWorkload,
  sourceWorkloadAt,
  upstreamExchangePeerOf,
  workloadAt,
  type PeerInfo,
} from './peer-info.ts';
export { PEER_METADATA_HEADER, PEER_METADATA_ID_HEADER, decodePeerMetadata, encodePeerMetadata, nodeId } from './peer-metadata-header.ts';
export { waypointSelf, type SelfParts, type SelfPeer } from './self-peer.ts';
export { forwardedFor, originalClient } from './forwarded.ts';
export { PeerExchangeDecoder, encodePeerExchange, type PeerExchangeState } from './peer-exchange.ts';
