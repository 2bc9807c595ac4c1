#!/usr/bin/python3
"""dra_client.py - drives cnlab-dra-plugin as the kubelet does, through
Python's grpcio and the stubs protoc generates from the plugin's own
dra.proto and registration.proto (the kubelet's v1 APIs); the stubs'
folder is $DRA_STUBS.  Prints each answer as JSON on one line.

  dra_client.py info SOCK                     Registration/GetInfo
  dra_client.py notify SOCK true|false [ERR]  Registration/NotifyRegistrationStatus
  dra_client.py prepare SOCK NS/NAME/UID...   DRAPlugin/NodePrepareResources
  dra_client.py unprepare SOCK NS/NAME/UID... DRAPlugin/NodeUnprepareResources
  dra_client.py raw SOCK PATH HEX             any method with these bytes:
                                              prints {"code": ..., "details": ...}
"""
import json
import os
import sys

sys.path.insert(0, os.environ["DRA_STUBS"])
import grpc  # noqa: E402
from google.protobuf.json_format import MessageToDict  # noqa: E402
import dra_pb2  # noqa: E402
import dra_pb2_grpc  # noqa: E402
import registration_pb2  # noqa: E402
import registration_pb2_grpc  # noqa: E402


def claims(specs):
    out = []
    for s in specs:
        ns, name, uid = s.split("/", 2)
        out.append(dra_pb2.Claim(namespace=ns, name=name, uid=uid))
    return out


def main():
    cmd, sock = sys.argv[1], sys.argv[2]
    ch = grpc.insecure_channel("unix://" + sock)
    try:
        if cmd == "info":
            r = registration_pb2_grpc.RegistrationStub(ch).GetInfo(registration_pb2.InfoRequest(), timeout=20)
        elif cmd == "notify":
            r = registration_pb2_grpc.RegistrationStub(ch).NotifyRegistrationStatus(
                registration_pb2.RegistrationStatus(plugin_registered=sys.argv[3] == "true",
                                                    error=sys.argv[4] if len(sys.argv) > 4 else ""), timeout=20)
        elif cmd == "prepare":
            r = dra_pb2_grpc.DRAPluginStub(ch).NodePrepareResources(
                dra_pb2.NodePrepareResourcesRequest(claims=claims(sys.argv[3:])), timeout=60)
        elif cmd == "unprepare":
            r = dra_pb2_grpc.DRAPluginStub(ch).NodeUnprepareResources(
                dra_pb2.NodeUnprepareResourcesRequest(claims=claims(sys.argv[3:])), timeout=60)
        elif cmd == "raw":
            call = ch.unary_unary(sys.argv[3], request_serializer=lambda b: b,
                                  response_deserializer=lambda b: b)
            r = call(bytes.fromhex(sys.argv[4]), timeout=20)
            print(json.dumps({"code": "OK", "reply": r.hex()}))
            return
        else:
            sys.exit(2)
    except grpc.RpcError as e:
        print(json.dumps({"code": e.code().name, "details": e.details()}))
        return
    print(json.dumps(MessageToDict(r, preserving_proto_field_name=True)))


main()
