/**
 * Peer-metadata wire fixtures made outside this code base, so the tests prove interop and not
 * only self-consistency.
 */

/**
 * Istio ≥ 1.24 key set, serialized by Google's C++ protobuf (the library Envoy links;
 * python3-protobuf 4.21.12 with the `cpp` backend) with `SerializeToString(deterministic=True)`,
 * which is what Envoy's `serializeToStringDeterministic` does, then standard padded base64:
 *
 * ```python
 * s = struct_pb2.Struct()  # fields as in ISTIO_124_PEER below, LABELS as a nested struct
 * base64.b64encode(s.SerializeToString(deterministic=True))
 * ```
 */
export const ISTIO_124_HEADER =
  'CiEKEUFWQUlMQUJJTElUWV9aT05FEgwaCnVzLWVhc3QxLWIKGgoKQ0xVU1RFUl9JRBIMGgpLdWJlcm5ldGVzCkgKCElERU5USVRZEjwaOnNwaWZmZTovL2NsdXN0ZXIubG9jYWwvbnMvYm9va2luZm8vc2EvYm9va2luZm8tcHJvZHVjdHBhZ2UKlAEKBkxBQkVMUxKJASqGAQoUCgNhcHASDRoLcHJvZHVjdHBhZ2UKMAofc2VydmljZS5pc3Rpby5pby9jYW5vbmljYWwtbmFtZRINGgtwcm9kdWN0cGFnZQorCiNzZXJ2aWNlLmlzdGlvLmlvL2Nhbm9uaWNhbC1yZXZpc2lvbhIEGgJ2MQoPCgd2ZXJzaW9uEgQaAnYxCigKBE5BTUUSIBoecHJvZHVjdHBhZ2UtdjEtNWQ2ZjhjOWI3LXgyeDR6ChcKCU5BTUVTUEFDRRIKGghib29raW5mbwpTCgVPV05FUhJKGkhrdWJlcm5ldGVzOi8vYXBpcy9hcHBzL3YxL25hbWVzcGFjZXMvYm9va2luZm8vZGVwbG95bWVudHMvcHJvZHVjdHBhZ2UtdjEKFAoGUkVHSU9OEgoaCHVzLWVhc3QxCiEKDVdPUktMT0FEX05BTUUSEBoOcHJvZHVjdHBhZ2UtdjE=';

/** The PeerInfo that {@link ISTIO_124_HEADER} describes. */
export const ISTIO_124_PEER = Object.freeze({
  name: 'productpage-v1-5d6f8c9b7-x2x4z',
  namespace: 'bookinfo',
  cluster: 'Kubernetes',
  workload: 'productpage-v1',
  type: 'deployment',
  service: 'productpage',
  revision: 'v1',
  app: 'productpage',
  version: 'v1',
  identity: 'spiffe://cluster.local/ns/bookinfo/sa/bookinfo-productpage',
  region: 'us-east1',
  availabilityZone: 'us-east1-b',
  labels: Object.freeze({
    app: 'productpage',
    'service.istio.io/canonical-name': 'productpage',
    'service.istio.io/canonical-revision': 'v1',
    version: 'v1',
  }),
});

/**
 * The `istio-peer-exchange` frame for {@link ISTIO_124_PEER} with node id
 * {@link EXCHANGE_NODE_ID}, built with the same C++ protobuf: outer Struct serialized
 * deterministically into `Any{type_url: "type.googleapis.com/google.protobuf.Struct"}`, prefixed
 * with `struct.pack('>II', 0x3D230467, len(payload))` (hex).
 */
export const ISTIO_124_EXCHANGE_FRAME_HEX =
  '3d230467000002b30a2a747970652e676f6f676c65617069732e636f6d2f676f6f676c652e70726f746f6275662e5374727563741284050a8e040a15782d656e766f792d706565722d6d6574616461746112f4032af1030a210a11415641494c4142494c4954595f5a4f4e45120c1a0a75732d65617374312d620a1a0a0a434c55535445525f4944120c1a0a4b756265726e657465730a480a084944454e54495459123c1a3a7370696666653a2f2f636c75737465722e6c6f63616c2f6e732f626f6f6b696e666f2f73612f626f6f6b696e666f2d70726f64756374706167650a94010a064c4142454c531289012a86010a140a03617070120d1a0b70726f64756374706167650a300a1f736572766963652e697374696f2e696f2f63616e6f6e6963616c2d6e616d65120d1a0b70726f64756374706167650a2b0a23736572766963652e697374696f2e696f2f63616e6f6e6963616c2d7265766973696f6e12041a0276310a0f0a0776657273696f6e12041a0276310a280a044e414d4512201a1e70726f64756374706167652d76312d3564366638633962372d783278347a0a170a094e414d455350414345120a1a08626f6f6b696e666f0a530a054f574e4552124a1a486b756265726e657465733a2f2f617069732f617070732f76312f6e616d657370616365732f626f6f6b696e666f2f6465706c6f796d656e74732f70726f64756374706167652d76310a140a06524547494f4e120a1a0875732d65617374310a210a0d574f524b4c4f41445f4e414d4512101a0e70726f64756374706167652d76310a710a18782d656e766f792d706565722d6d657461646174612d696412551a53736964656361727e31302e312e322e337e70726f64756374706167652d76312d3564366638633962372d783278347a2e626f6f6b696e666f7e626f6f6b696e666f2e7376632e636c75737465722e6c6f63616c';

export const EXCHANGE_NODE_ID = 'sidecar~10.1.2.3~productpage-v1-5d6f8c9b7-x2x4z.bookinfo~bookinfo.svc.cluster.local';

/**
 * Smallest Envoy output: a peer that only knows its namespace `demo`. Envoy always writes LABELS,
 * even empty. Built by hand from the protobuf wire format (tag = field << 3 | wire type 2):
 *
 * ```
 * 0a 0c                      Struct.fields (1) entry, 12 bytes
 *    0a 06 "LABELS"            key (1)
 *    12 02                     value (2): Value, 2 bytes
 *       2a 00                    struct_value (5): empty Struct
 * 0a 13                      Struct.fields entry, 19 bytes
 *    0a 09 "NAMESPACE"         key
 *    12 06                     value: Value, 6 bytes
 *       1a 04 "demo"             string_value (3)
 * ```
 * (C++ protobuf's deterministic output for this Struct is the same bytes.)
 */
export const MINIMAL_HEX = '0a0c0a064c4142454c5312022a000a130a094e414d4553504143451206' + '1a0464656d6f';
export const MINIMAL_HEADER = 'CgwKBkxBQkVMUxICKgAKEwoJTkFNRVNQQUNFEgYaBGRlbW8=';

/**
 * Istio 1.14.5 sidecar (bookinfo `reviews-v3`) request header, as captured and published with
 * its decoded contents in a public write-up on Istio metrics: ≤ 1.18 key set (APP_CONTAINERS,
 * INSTANCE_IPS, ISTIO_VERSION, MESH_ID, PLATFORM_METADATA, all pod labels).
 * Its `x-envoy-peer-metadata-id` was `sidecar~172.16.0.133~reviews-v3-58b6479b-62rv5.default~default.svc.cluster.local`.
 */
export const ISTIO_114_HEADER =
  'ChsKDkFQUF9DT05UQUlORVJTEgkaB3Jldmlld3MKGgoKQ0xVU1RFUl9JRBIMGgpLdWJlcm5ldGVzCh4KDElOU1RBTkNFX0lQUxIOGgwxNzIuMTYuMC4xMzMKGQoNSVNUSU9fVkVSU0lPThIIGgYxLjE0LjUK0wEKBkxBQkVMUxLIASrFAQoQCgNhcHASCRoHcmV2aWV3cwofChFwb2QtdGVtcGxhdGUtaGFzaBIKGgg1OGI2NDc5YgokChlzZWN1cml0eS5pc3Rpby5pby90bHNNb2RlEgcaBWlzdGlvCiwKH3NlcnZpY2UuaXN0aW8uaW8vY2Fub25pY2FsLW5hbWUSCRoHcmV2aWV3cworCiNzZXJ2aWNlLmlzdGlvLmlvL2Nhbm9uaWNhbC1yZXZpc2lvbhIEGgJ2MwoPCgd2ZXJzaW9uEgQaAnYzChoKB01FU0hfSUQSDxoNY2x1c3Rlci5sb2NhbAojCgROQU1FEhsaGXJldmlld3MtdjMtNThiNjQ3OWItNjJydjUKFgoJTkFNRVNQQUNFEgkaB2RlZmF1bHQKTgoFT1dORVISRRpDa3ViZXJuZXRlczovL2FwaXMvYXBwcy92MS9uYW1lc3BhY2VzL2RlZmF1bHQvZGVwbG95bWVudHMvcmV2aWV3cy12MwoXChFQTEFURk9STV9NRVRBREFUQRICKgAKHQoNV09SS0xPQURfTkFNRRIMGgpyZXZpZXdzLXYz';

/**
 * Istio 1.20.4 ingress gateway header, from a published request dump (1.19–1.23 native-filter
 * era: all pod labels in LABELS, plus the older extras this proxy still sent).
 * Its id was `router~10.1.0.19~istio-ingressgateway-7db5d74887-9f47v.istio-system~istio-system.svc.cluster.local`.
 */
export const ISTIO_120_GATEWAY_HEADER =
  'ChoKCkNMVVNURVJfSUQSDBoKS3ViZXJuZXRlcwobCgxJTlNUQU5DRV9JUFMSCxoJMTAuMS4wLjE5ChkKDUlTVElPX1ZFUlNJT04SCBoGMS4yMC40CpwDCgZMQUJFTFMSkQMqjgMKHQoDYXBwEhYaFGlzdGlvLWluZ3Jlc3NnYXRld2F5ChMKBWNoYXJ0EgoaCGdhdGV3YXlzChQKCGhlcml0YWdlEggaBlRpbGxlcgo2CilpbnN0YWxsLm9wZXJhdG9yLmlzdGlvLmlvL293bmluZy1yZXNvdXJjZRIJGgd1bmtub3duChkKBWlzdGlvEhAaDmluZ3Jlc3NnYXRld2F5ChkKDGlzdGlvLmlvL3JldhIJGgdkZWZhdWx0CjAKG29wZXJhdG9yLmlzdGlvLmlvL2NvbXBvbmVudBIRGg9JbmdyZXNzR2F0ZXdheXMKEgoHcmVsZWFzZRIHGgVpc3Rpbwo5Ch9zZXJ2aWNlLmlzdGlvLmlvL2Nhbm9uaWNhbC1uYW1lEhYaFGlzdGlvLWluZ3Jlc3NnYXRld2F5Ci8KI3NlcnZpY2UuaXN0aW8uaW8vY2Fub25pY2FsLXJldmlzaW9uEggaBmxhdGVzdAoiChdzaWRlY2FyLmlzdGlvLmlvL2luamVjdBIHGgVmYWxzZQoaCgdNRVNIX0lEEg8aDWNsdXN0ZXIubG9jYWwKLwoETkFNRRInGiVpc3Rpby1pbmdyZXNzZ2F0ZXdheS03ZGI1ZDc0ODg3LTlmNDd2ChsKCU5BTUVTUEFDRRIOGgxpc3Rpby1zeXN0ZW0KXQoFT1dORVISVBpSa3ViZXJuZXRlczovL2FwaXMvYXBwcy92MS9uYW1lc3BhY2VzL2lzdGlvLXN5c3RlbS9kZXBsb3ltZW50cy9pc3Rpby1pbmdyZXNzZ2F0ZXdheQonCg1XT1JLTE9BRF9OQU1FEhYaFGlzdGlvLWluZ3Jlc3NnYXRld2F5';
