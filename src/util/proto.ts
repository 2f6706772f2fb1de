/**
 * A tiny proto3 descriptor DSL for @bufbuild/protobuf at run time: the project declares the few
 * protobuf messages it speaks (ext_authz, istiod's CA and WDS) from their upstream field numbers
 * instead of generating code, and looks the message schemas up in a registry built from them.
 * Fields a declaration leaves out are skipped on decode (unknown fields) and never written.
 */
import { create, createFileRegistry, type DescFile, type Message, type MessageInitShape } from '@bufbuild/protobuf';
import type { GenMessage } from '@bufbuild/protobuf/codegenv2';
import {
  DescriptorProtoSchema,
  EnumDescriptorProtoSchema,
  FieldDescriptorProto_Label,
  FieldDescriptorProto_Type,
  FieldDescriptorProtoSchema,
  FileDescriptorProtoSchema,
  type FileDescriptorProto,
} from '@bufbuild/protobuf/wkt';

export const ProtoType = FieldDescriptorProto_Type;
export type FieldInit = MessageInitShape<typeof FieldDescriptorProtoSchema>;
export type MessageInit = MessageInitShape<typeof DescriptorProtoSchema>;
export type EnumInit = MessageInitShape<typeof EnumDescriptorProtoSchema>;

/** One field; `proto3Optional` declares `optional` scalars (give them a synthetic oneof too). */
export function field(
  name: string,
  number: number,
  type: FieldDescriptorProto_Type,
  opts: { typeName?: string; repeated?: boolean; oneof?: number; proto3Optional?: boolean } = {},
): FieldInit {
  return {
    name,
    number,
    type,
    label: opts.repeated ? FieldDescriptorProto_Label.REPEATED : FieldDescriptorProto_Label.OPTIONAL,
    jsonName: name.replace(/_([a-z])/g, (_, c: string) => c.toUpperCase()),
    ...(opts.typeName ? { typeName: opts.typeName } : {}),
    ...(opts.oneof !== undefined ? { oneofIndex: opts.oneof } : {}),
    ...(opts.proto3Optional ? { proto3Optional: true } : {}),
  };
}

/** A message-typed field (`typeName`: full name with a leading dot). */
export const msgField = (name: string, number: number, typeName: string, opts: { repeated?: boolean; oneof?: number } = {}): FieldInit =>
  field(name, number, ProtoType.MESSAGE, { typeName, ...opts });

/** An enum-typed field (`typeName`: full name with a leading dot). */
export const enumField = (name: string, number: number, typeName: string, opts: { repeated?: boolean } = {}): FieldInit =>
  field(name, number, ProtoType.ENUM, { typeName, ...opts });

/** An enum declaration from `NAME: number` pairs. */
export function enumType(name: string, values: Readonly<Record<string, number>>): EnumInit {
  return { name, value: Object.entries(values).map(([n, number]) => ({ name: n, number })) };
}

/**
 * A `map<string, V>` field `name` = `number` of message `owner` (full name, leading dot): the
 * field and the nested map-entry message to declare in `owner`. `value` defaults to `string`.
 */
export function mapField(owner: string, name: string, number: number, value: FieldInit = field('value', 2, ProtoType.STRING)): { field: FieldInit; entry: MessageInit } {
  const entryName = `${name.replace(/(^|_)([a-z])/g, (_m, _s, c: string) => c.toUpperCase())}Entry`;
  return {
    field: msgField(name, number, `${owner}.${entryName}`, { repeated: true }),
    entry: { name: entryName, field: [field('key', 1, ProtoType.STRING), { ...value, name: 'value', number: 2, jsonName: 'value' }], options: { mapEntry: true } },
  };
}

/** A proto3 file descriptor. */
export function protoFile(name: string, pkg: string, dependency: string[], messageType: MessageInit[], enumTypes: EnumInit[] = []): FileDescriptorProto {
  return create(FileDescriptorProtoSchema, { name, package: pkg, syntax: 'proto3', dependency, messageType, enumType: enumTypes });
}

/** `google/rpc/status.proto`: `Status{code=1, message=2, details=3}` (googleapis). */
export const RPC_STATUS_FILE: FileDescriptorProto = protoFile('google/rpc/status.proto', 'google.rpc', ['google/protobuf/any.proto'], [
  { name: 'Status', field: [field('code', 1, ProtoType.INT32), field('message', 2, ProtoType.STRING), msgField('details', 3, '.google.protobuf.Any', { repeated: true })] },
]);

/**
 * The message schemas of `files` (each with its dependencies, by file name, in `deps`): returns a
 * lookup that throws for a name the files do not declare (a programming error of the caller).
 */
export function messageRegistry(
  what: string,
  file: FileDescriptorProto,
  deps: ReadonlyMap<string, FileDescriptorProto | DescFile>,
): <T extends Message>(typeName: string) => GenMessage<T> {
  const registry = createFileRegistry(file, (name) => deps.get(name));
  return <T extends Message>(typeName: string): GenMessage<T> => {
    const desc = registry.getMessage(typeName);
    if (!desc) throw new Error(`${what} proto: ${typeName} missing from the registry`);
    return desc as unknown as GenMessage<T>;
  };
}
